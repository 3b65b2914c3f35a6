/* The direct producer's v2 record batch encoder (grete/direct/encoder.py holds the Python twin,
 * which is the fallback and the reference the tests compare against).
 *
 * A batch is built in one bytearray whose first 61 bytes are left for the header:
 *   append(batch, timestamp_delta, offset_delta, key, value, headers) -> len(batch)
 *       encodes one record (length, attributes 0, zig-zag varint deltas, key, value, headers)
 *       at the end of the bytearray, sized once and written in place;
 *   seal(batch, count, base_timestamp, max_timestamp) -> batch
 *       writes the header (no producer id, no sequence, compression none) and its CRC-32C.
 * One call per record and one per batch: no per-field Python on the produce path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BATCH_OVERHEAD 61
#define CRC_OFFSET 17
#define ATTRIBUTES_OFFSET 21

/* --- CRC-32C (Castagnoli, reflected 0x82F63B78) ------------------------------------------------ */
static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc_table[t][n] = (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xFF];
}

/* Slicing-by-8: eight bytes per step through eight tables (any CPU). */
static uint32_t crc_soft(uint32_t crc, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;  /* little-endian: the low four bytes meet the running CRC */
        crc = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^ crc_table[5][(w >> 16) & 0xFF]
            ^ crc_table[4][(w >> 24) & 0xFF] ^ crc_table[3][(w >> 32) & 0xFF]
            ^ crc_table[2][(w >> 40) & 0xFF] ^ crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* SSE 4.2's crc32 instruction computes exactly this polynomial, eight bytes at a time. */
__attribute__((target("sse4.2")))
static uint32_t crc_hard(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c;
}
static int have_sse42;
#define CRC_UPDATE(crc, p, n) (have_sse42 ? crc_hard(crc, p, n) : crc_soft(crc, p, n))
#define CRC_DETECT() (have_sse42 = __builtin_cpu_supports("sse4.2") != 0)
#else
static const int have_sse42 = 0;
#define CRC_UPDATE(crc, p, n) crc_soft(crc, p, n)
#define CRC_DETECT() ((void)0)
#endif

static uint32_t crc32c(const unsigned char *p, size_t n) {
    return ~CRC_UPDATE(0xFFFFFFFFu, p, n);
}

/* --- zig-zag varints --------------------------------------------------------------------------- */
static inline uint64_t zigzag(int64_t v) {
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline Py_ssize_t varint_size(int64_t v) {
    uint64_t raw = zigzag(v);
    Py_ssize_t n = 1;
    while (raw >= 0x80) {
        raw >>= 7;
        n++;
    }
    return n;
}

static inline unsigned char *put_varint(unsigned char *out, int64_t v) {
    uint64_t raw = zigzag(v);
    while (raw >= 0x80) {
        *out++ = (unsigned char)((raw & 0x7F) | 0x80);
        raw >>= 7;
    }
    *out++ = (unsigned char)raw;
    return out;
}

/* A nullable byte field: its buffer (or none) and its encoded size (length varint + bytes). */
typedef struct {
    Py_buffer view;
    int present;
} Field;

static int field_open(Field *f, PyObject *obj, const char *what) {
    f->present = 0;
    if (obj == Py_None)
        return 0;
    if (PyObject_GetBuffer(obj, &f->view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes-like or None, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    f->present = 1;
    return 0;
}

static void field_close(Field *f) {
    if (f->present)
        PyBuffer_Release(&f->view);
}

static inline Py_ssize_t field_size(const Field *f) {
    return f->present ? varint_size(f->view.len) + f->view.len : 1;
}

static inline unsigned char *put_field(unsigned char *out, const Field *f) {
    if (!f->present)
        return put_varint(out, -1);
    out = put_varint(out, f->view.len);
    memcpy(out, f->view.buf, (size_t)f->view.len);
    return out + f->view.len;
}

/* Headers as (name: str, value: bytes-like | None) pairs; names encoded as the Python encoder does
   (UTF-8, surrogateescape). ``fields`` holds 2 * count opened fields, ``names`` the encoded names. */
static int headers_open(PyObject *seq, Py_ssize_t count, Field *fields, PyObject **names) {
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "headers must be (str, bytes | None) pairs");
            return -1;
        }
        PyObject *name = PyTuple_GET_ITEM(pair, 0);
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "a header's name must be str");
            return -1;
        }
        names[i] = PyUnicode_AsEncodedString(name, "utf-8", "surrogateescape");
        if (names[i] == NULL || field_open(&fields[2 * i], names[i], "a header's name") < 0
                || field_open(&fields[2 * i + 1], PyTuple_GET_ITEM(pair, 1), "a header's value") < 0)
            return -1;
    }
    return 0;
}

static PyObject *append(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "append(batch, timestamp_delta, offset_delta, key, value, headers)");
        return NULL;
    }
    PyObject *batch = args[0];
    if (!PyByteArray_CheckExact(batch)) {
        PyErr_SetString(PyExc_TypeError, "batch must be a bytearray");
        return NULL;
    }
    int64_t timestamp_delta = PyLong_AsLongLong(args[1]);
    if (timestamp_delta == -1 && PyErr_Occurred())
        return NULL;
    long offset_delta = PyLong_AsLong(args[2]);
    if (offset_delta == -1 && PyErr_Occurred())
        return NULL;
    if (offset_delta < INT32_MIN || offset_delta > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "offset_delta outside int32");
        return NULL;
    }
    PyObject *result = NULL, *header_seq = NULL, **names = NULL;
    Field key, value, *header_fields = NULL;
    Py_ssize_t header_count = 0, opened = 0;
    key.present = value.present = 0;
    if (field_open(&key, args[3], "key") < 0 || field_open(&value, args[4], "value") < 0)
        goto done;
    if (args[5] != Py_None) {
        header_seq = PySequence_Fast(args[5], "headers must be a sequence of (str, bytes | None) pairs");
        if (header_seq == NULL)
            goto done;
        header_count = PySequence_Fast_GET_SIZE(header_seq);
        if (header_count) {
            header_fields = PyMem_Calloc((size_t)header_count * 2, sizeof(Field));
            names = PyMem_Calloc((size_t)header_count, sizeof(PyObject *));
            if (header_fields == NULL || names == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            opened = header_count;
            if (headers_open(header_seq, header_count, header_fields, names) < 0)
                goto done;
        }
    }
    Py_ssize_t body = 1 + varint_size(timestamp_delta) + varint_size(offset_delta) + field_size(&key)
        + field_size(&value) + varint_size(header_count);
    for (Py_ssize_t i = 0; i < 2 * header_count; i++)
        body += field_size(&header_fields[i]);
    Py_ssize_t start = PyByteArray_GET_SIZE(batch);
    if (PyByteArray_Resize(batch, start + varint_size(body) + body) < 0)
        goto done;
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(batch) + start;
    out = put_varint(out, body);
    *out++ = 0;  /* attributes */
    out = put_varint(out, timestamp_delta);
    out = put_varint(out, offset_delta);
    out = put_field(out, &key);
    out = put_field(out, &value);
    out = put_varint(out, header_count);
    for (Py_ssize_t i = 0; i < 2 * header_count; i++)
        out = put_field(out, &header_fields[i]);
    result = PyLong_FromSsize_t(PyByteArray_GET_SIZE(batch));
done:
    field_close(&key);
    field_close(&value);
    for (Py_ssize_t i = 0; i < opened; i++) {
        field_close(&header_fields[2 * i]);
        field_close(&header_fields[2 * i + 1]);
        Py_XDECREF(names[i]);
    }
    PyMem_Free(header_fields);
    PyMem_Free(names);
    Py_XDECREF(header_seq);
    return result;
}

static inline unsigned char *put_be(unsigned char *out, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--)
        *out++ = (unsigned char)(v >> (8 * i));
    return out;
}

static PyObject *seal(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "seal(batch, count, base_timestamp, max_timestamp)");
        return NULL;
    }
    PyObject *batch = args[0];
    if (!PyByteArray_CheckExact(batch) || PyByteArray_GET_SIZE(batch) < BATCH_OVERHEAD) {
        PyErr_SetString(PyExc_ValueError, "batch must be a bytearray of at least its 61-byte header");
        return NULL;
    }
    long count = PyLong_AsLong(args[1]);
    int64_t base_timestamp = PyLong_AsLongLong(args[2]);
    int64_t max_timestamp = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (count < 1 || count > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "count outside 1..int32");
        return NULL;
    }
    Py_ssize_t size = PyByteArray_GET_SIZE(batch);
    if (size - 12 > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "batch larger than int32");
        return NULL;
    }
    unsigned char *b = (unsigned char *)PyByteArray_AS_STRING(batch);
    unsigned char *out = put_be(b, 0, 8);                    /* baseOffset: the broker's */
    out = put_be(out, (uint64_t)(size - 12), 4);             /* batchLength */
    out = put_be(out, (uint32_t)-1, 4);                      /* partitionLeaderEpoch */
    *out++ = 2;                                              /* magic */
    out += 4;                                                /* crc, below */
    out = put_be(out, 0, 2);                                 /* attributes: no codec, create time */
    out = put_be(out, (uint64_t)(count - 1), 4);             /* lastOffsetDelta */
    out = put_be(out, (uint64_t)base_timestamp, 8);
    out = put_be(out, (uint64_t)max_timestamp, 8);
    out = put_be(out, (uint64_t)-1, 8);                      /* producerId */
    out = put_be(out, (uint16_t)-1, 2);                      /* producerEpoch */
    out = put_be(out, (uint32_t)-1, 4);                      /* baseSequence */
    put_be(out, (uint64_t)count, 4);
    uint32_t crc = crc32c(b + ATTRIBUTES_OFFSET, (size_t)(size - ATTRIBUTES_OFFSET));
    put_be(b + CRC_OFFSET, crc, 4);
    return Py_NewRef(batch);
}

static PyObject *crc_of(PyObject *arg, int portable) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t c = portable ? ~crc_soft(0xFFFFFFFFu, view.buf, (size_t)view.len) : crc32c(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *crc(PyObject *module, PyObject *arg) {
    return crc_of(arg, 0);
}

/* The table-driven path, whatever the CPU: the tests hold it to the same answers. */
static PyObject *crc_portable(PyObject *module, PyObject *arg) {
    return crc_of(arg, 1);
}

static PyMethodDef methods[] = {
    {"append", (PyCFunction)(void (*)(void))append, METH_FASTCALL, "Append one encoded record; the new length."},
    {"seal", (PyCFunction)(void (*)(void))seal, METH_FASTCALL, "Write the batch header and its CRC-32C; the batch."},
    {"crc32c", crc, METH_O, "CRC-32C of a bytes-like object."},
    {"crc32c_portable", crc_portable, METH_O, "CRC-32C without the CPU's crc32 instruction."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_grete_encode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__grete_encode(void) {
    crc_init();
    CRC_DETECT();
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL && PyModule_AddIntConstant(module, "HARDWARE_CRC", have_sse42) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
