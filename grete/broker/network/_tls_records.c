/* The TLS record reader of SSL listeners (grete/broker/network/tls_records.py loads it; the
 * transport reads through Python's ssl where it cannot be built).
 *
 *   read_into(sslsock, buffer) -> (nbytes, state)
 *       decrypts the records a connection's incoming memory BIO holds into ``buffer``, as many as
 *       fit, in one call with the interpreter lock released. ``sslsock`` is the ``_ssl._SSLSocket``
 *       behind an ``ssl.SSLObject`` (its ``_sslobj``). ``state`` says why it stopped:
 *       0 the BIO holds no whole record more, 1 the buffer is full, 2 the peer's close_notify.
 *       A TLS failure raises ssl.SSLError with OpenSSL's reason.
 *
 * Why: Python's SSLObject.read returns one record per call, and clients send Produce requests as
 * TLS records of 1-2 KB (librdkafka writes each buffer segment with its own SSL_write), so a
 * megabyte of requests cost ~550 calls through Python on the event loop's thread.
 *
 * The SSL* is the one Python's ssl module made (same OpenSSL, same connection state): read from the
 * _SSLSocket's second field, and used only once OpenSSL's own record of its owner (the app data
 * CPython stores, SSL_set_app_data(ssl, sslsock)) names that object. The caller keeps the rule the
 * transport already keeps: one thread uses a connection's SSL object at a time.
 *
 * OpenSSL's prototypes are declared here (stable ABI since 1.1.1) so building needs no headers but
 * Python's; the module is linked against the libssl and libcrypto the interpreter has loaded.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

typedef struct ssl_st SSL;
extern int SSL_read_ex(SSL *ssl, void *buf, size_t num, size_t *readbytes);
extern int SSL_get_error(const SSL *ssl, int ret);
extern void *SSL_get_ex_data(const SSL *ssl, int idx);
extern unsigned long ERR_get_error(void);
extern void ERR_error_string_n(unsigned long e, char *buf, size_t len);
extern void ERR_clear_error(void);

#define SSL_ERROR_WANT_READ 2
#define SSL_ERROR_ZERO_RETURN 6

/* The head of CPython's PySSLSocket (Modules/_ssl.c, unchanged from 3.7 to 3.13). */
typedef struct {
    PyObject_HEAD
    PyObject *socket;
    SSL *ssl;
} SslSocketHead;

static PyObject *ssl_error;  /* ssl.SSLError */

static SSL *ssl_of(PyObject *sslsock) {
    PyTypeObject *type = Py_TYPE(sslsock);
    if (strcmp(type->tp_name, "_ssl._SSLSocket") != 0 || type->tp_basicsize < (Py_ssize_t)sizeof(SslSocketHead)) {
        PyErr_Format(PyExc_TypeError, "read_into needs an _ssl._SSLSocket, not %s", type->tp_name);
        return NULL;
    }
    SSL *ssl = ((SslSocketHead *)sslsock)->ssl;
    if (ssl == NULL || SSL_get_ex_data(ssl, 0) != (void *)sslsock) {
        PyErr_SetString(PyExc_TypeError, "this Python's _ssl._SSLSocket keeps its SSL* elsewhere");
        return NULL;
    }
    return ssl;
}

static PyObject *read_into(PyObject *self, PyObject *args) {
    PyObject *sslsock;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "Ow*", &sslsock, &view))
        return NULL;
    SSL *ssl = ssl_of(sslsock);
    if (ssl == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    char *out = view.buf;
    size_t room = (size_t)view.len, filled = 0;
    int state = 1, failure = 0;
    unsigned long code = 0;
    Py_BEGIN_ALLOW_THREADS
    while (filled < room) {
        size_t n = 0;
        int ok = SSL_read_ex(ssl, out + filled, room - filled, &n);
        if (ok) {
            filled += n;
            continue;
        }
        int err = SSL_get_error(ssl, ok);
        if (err == SSL_ERROR_WANT_READ) {
            state = 0;
        } else if (err == SSL_ERROR_ZERO_RETURN) {
            state = 2;
        } else {
            failure = err;
            code = ERR_get_error();
            ERR_clear_error();  /* the queue is per thread: leave nothing for another connection's call */
        }
        break;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (failure) {
        char reason[256];
        if (code)
            ERR_error_string_n(code, reason, sizeof reason);
        else
            snprintf(reason, sizeof reason, "SSL_read_ex failed (SSL_get_error %d)", failure);
        PyErr_SetString(ssl_error, reason);
        return NULL;
    }
    return Py_BuildValue("(ni)", (Py_ssize_t)filled, state);
}

static PyMethodDef methods[] = {
    {"read_into", read_into, METH_VARARGS, "Decrypt the whole records the incoming BIO holds into a buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_grete_tls_records", NULL, -1, methods};

PyMODINIT_FUNC PyInit__grete_tls_records(void) {
    PyObject *ssl = PyImport_ImportModule("ssl");
    if (ssl == NULL)
        return NULL;
    ssl_error = PyObject_GetAttrString(ssl, "SSLError");
    Py_DECREF(ssl);
    if (ssl_error == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
