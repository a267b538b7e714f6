"""The decoder for each ABI: the one place that knows them all.

``effects.py`` holds what they share and imports none of them; each ABI's
module imports only that; the analysis asks here for the ABI it has.
"""

from __future__ import annotations

from ..base.abi import Arch
from .aarch64 import AArch64Decoder
from .amd64 import AMD64Decoder
from .effects import _Decoder, capstone_available
from .s390x import S390XDecoder

__all__ = ["decoder_for"]

_DECODERS: dict[str, _Decoder | None] = {}


def decoder_for(arch: Arch) -> _Decoder | None:
    """A decoder for the ABI, or None (no capstone, or an ABI without one);
    one per ABI, made on first use."""
    if arch.name in _DECODERS:
        return _DECODERS[arch.name]
    decoder: _Decoder | None = None
    if capstone_available():
        if arch.name == "amd64":
            decoder = AMD64Decoder()
        elif arch.name == "aarch64":
            decoder = AArch64Decoder()
        elif arch.name == "s390x":
            decoder = S390XDecoder()
    _DECODERS[arch.name] = decoder
    return decoder

