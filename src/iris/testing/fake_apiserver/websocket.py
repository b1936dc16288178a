"""Just enough RFC 6455 for the server side of ``pods/exec``: handshake key, frames in and out."""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import BinaryIO

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def accept_key(client_key: str) -> str:
    return base64.b64encode(hashlib.sha1((client_key + _GUID).encode()).digest()).decode()


def encode_frame(opcode: int, payload: bytes) -> bytes:
    """A final, unmasked frame (servers never mask)."""
    header = bytes([0x80 | opcode])
    length = len(payload)
    if length < 126:
        header += bytes([length])
    elif length < 1 << 16:
        header += bytes([126]) + struct.pack("!H", length)
    else:
        header += bytes([127]) + struct.pack("!Q", length)
    return header + payload


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("websocket closed mid-frame")
        data += chunk
    return data


def read_message(stream: BinaryIO) -> tuple[int, bytes]:
    """The next whole message (fragments joined) as (opcode, payload); control frames come alone."""
    opcode, payload = None, b""
    while True:
        first, second = _read_exactly(stream, 2)
        frame_opcode = first & 0x0F
        length = second & 0x7F
        if length == 126:
            length = struct.unpack("!H", _read_exactly(stream, 2))[0]
        elif length == 127:
            length = struct.unpack("!Q", _read_exactly(stream, 8))[0]
        mask = _read_exactly(stream, 4) if second & 0x80 else b""
        data = _read_exactly(stream, length)
        if mask:
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        if frame_opcode >= OP_CLOSE:
            return frame_opcode, data
        if frame_opcode != OP_CONTINUATION:
            opcode = frame_opcode
        payload += data
        if first & 0x80:
            return opcode if opcode is not None else OP_BINARY, payload
