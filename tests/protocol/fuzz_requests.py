"""Fuzz target: frame splitting, request-header decoding and body decoding of every api/version.

By hand (from the repository root)::

    python tests/protocol/fuzz_requests.py -runs=200000 -max_len=4096 [corpus_dir]

Only ``ProtocolError`` may escape the decoders; anything else is a crash atheris reports. The test
suite runs ``check_input`` over a few thousand mutated frames (tests/protocol/test_fuzz.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from grete.protocol.codec import Message
from grete.protocol.errors import ProtocolError
from grete.protocol.framing import FrameReader
from grete.protocol.headers import decode_request_header
from grete.protocol.messages import APIS

_API_KEYS = sorted(APIS)
_MAX_FRAME = 1 << 20


def _classes(api_key: int) -> tuple[type[Message], type[Message]]:
    info = APIS[api_key]
    return info.request, info.response


def check_frames(data: bytes) -> None:
    """Treat ``data`` as a client's byte stream, the way the broker's connection does."""
    reader = FrameReader(max_frame=_MAX_FRAME)
    try:
        for frame in reader.feed(data):
            header, offset = decode_request_header(frame)
            if not header.known:
                continue
            request, _ = _classes(header.api_key)
            request.from_bytes(frame[offset:], header.api_version)
    except ProtocolError:
        pass


def check_body(data: bytes) -> None:
    """First two bytes pick an API and version; the rest is decoded as its request and response."""
    if len(data) < 2:
        return
    info = APIS[_API_KEYS[data[0] % len(_API_KEYS)]]
    version = info.min_version + data[1] % (info.max_version - info.min_version + 1)
    for cls in _classes(info.key):
        try:
            decoded = cls.from_bytes(data[2:], version)
        except ProtocolError:
            continue
        # Whatever decoded must encode again (values came from the wire, so they fit).
        decoded.to_bytes(version)


def check_input(data: bytes) -> None:
    if data[:1] == b"\x00":
        check_body(data[1:])
    else:
        check_frames(data[1:])


def write_seeds(directory: Path) -> int:
    """Seed corpus: a default request of every api/version, as a frame and as a bare body."""
    from grete.protocol.codec import Writer
    from grete.protocol.headers import RequestHeader, encode_request_header

    directory.mkdir(parents=True, exist_ok=True)
    count = 0
    for index, key in enumerate(_API_KEYS):
        info = APIS[key]
        for version in range(info.min_version, info.max_version + 1):
            w = Writer()
            pos = w.reserve_int32()
            encode_request_header(w, RequestHeader(api_key=key, api_version=version, correlation_id=1,
                                                   client_id="seed"))
            info.request().encode(w, version)
            w.patch_int32(pos, w.nbytes - 4)
            frame = w.getvalue()
            body = info.request().to_bytes(version)
            (directory / f"frame-{key}-{version}").write_bytes(b"\x01" + frame)
            (directory / f"body-{key}-{version}").write_bytes(
                b"\x00" + bytes([index, version - info.min_version]) + body)
            count += 2
    return count


def main() -> None:
    import atheris

    corpus = [a for a in sys.argv[1:] if not a.startswith("-")]
    if corpus and not any(Path(corpus[0]).glob("*")):
        print(f"seeded {write_seeds(Path(corpus[0]))} inputs into {corpus[0]}", file=sys.stderr)
    atheris.instrument_all()
    atheris.Setup(sys.argv, check_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
