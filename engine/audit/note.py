"""C2SP signed notes with Ed25519 keys, and the tlog-checkpoint text they sign.

A note is text ending in a newline, a blank line, then signature lines ``— <name>
base64(key id || signature)`` (an em dash, U+2014). The key id is the first four bytes of
``SHA-256(name || "\\n" || 0x01 || public key)``; 0x01 is the Ed25519 signature type. Keys are
written as the note package writes them: a verifier ``<name>+<hex key id>+base64(0x01 ||
public key)``, a signer ``PRIVATE+KEY+<name>+<hex key id>+base64(0x01 || seed)``.

A checkpoint's text is the origin, the tree size in decimal and the base64 tree head, one per
line; lines after those are extensions, kept but not interpreted.

Every malformed key, note or checkpoint, and every signature that does not verify, raises
``InvalidArgument`` with the reason.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.errors import InvalidArgument

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

# cryptography is imported where a key is used: most processes that import the engine (every
# `foldline` command, each server worker) never sign or check a note, and its import costs
# about a fifth of such a command's start.

ED25519 = b"\x01"
DASH = "\u2014"
_PRIVATE = "PRIVATE+KEY+"
_HEX_ID = re.compile(r"[0-9a-f]{8}")
_SIZE = re.compile(r"0|[1-9][0-9]*")


def key_id(name: str, public: bytes) -> bytes:
    """The four-byte id of an Ed25519 key under ``name``."""
    return hashlib.sha256(name.encode() + b"\n" + ED25519 + public).digest()[:4]


def _check_name(name: str) -> None:
    if not name or "+" in name or any(ch.isspace() or ord(ch) < 0x20 for ch in name):
        raise InvalidArgument(
            f"key name {name!r}: must be non-empty, without spaces, control characters or '+'"
        )
    _utf8(name, "key name")


def _utf8(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as ex:  # a lone surrogate, as argv decodes undecodable bytes
        raise InvalidArgument(f"{what} {text!r}: not valid UTF-8") from ex


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as ex:
        raise InvalidArgument(f"{what}: not base64") from ex


@dataclass(frozen=True)
class Verifier:
    """Checks signatures of one named Ed25519 key."""

    name: str
    public: bytes

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.public)

    def text(self) -> str:
        encoded = base64.b64encode(ED25519 + self.public).decode()
        return f"{self.name}+{self.key_id.hex()}+{encoded}"

    def is_valid(self, message: bytes, signature: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class Signer:
    """Signs notes with one named Ed25519 key (``seed`` is RFC 8032's 32-byte private key)."""

    name: str
    seed: bytes

    @property
    def verifier(self) -> Verifier:
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        key = _private(self.seed).public_key()
        return Verifier(self.name, key.public_bytes(Encoding.Raw, PublicFormat.Raw))

    def text(self) -> str:
        encoded = base64.b64encode(ED25519 + self.seed).decode()
        return f"{_PRIVATE}{self.name}+{self.verifier.key_id.hex()}+{encoded}"

    def sign(self, message: bytes) -> bytes:
        return _private(self.seed).sign(message)


def _private(seed: bytes) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(seed)


def generate_signer(name: str) -> Signer:
    """A new random key named ``name``."""
    _check_name(name)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    seed = Ed25519PrivateKey.generate().private_bytes(
        Encoding.Raw, PrivateFormat.Raw, NoEncryption()
    )
    return Signer(name, seed)


def _parse_key(text: str, what: str) -> tuple[str, bytes]:
    name, hex_id, encoded = [*text.strip().split("+", 2), "", ""][:3]
    _check_name(name)
    raw = _b64(encoded, what)
    if not _HEX_ID.fullmatch(hex_id) or raw[:1] != ED25519 or len(raw) != 33:
        raise InvalidArgument(f"{what}: not an Ed25519 key of the form name+id+key")
    return name, bytes.fromhex(hex_id) + raw[1:]


def parse_verifier(text: str) -> Verifier:
    """A verifier key from its text form."""
    name, data = _parse_key(text, "verifier key")
    verifier = Verifier(name, data[4:])
    if verifier.key_id != data[:4]:
        raise InvalidArgument("verifier key: its id does not match its name and key")
    return verifier


def parse_signer(text: str) -> Signer:
    """A signer key from its text form."""
    text = text.strip()
    if not text.startswith(_PRIVATE):
        raise InvalidArgument("signer key: does not start with PRIVATE+KEY+")
    name, data = _parse_key(text.removeprefix(_PRIVATE), "signer key")
    signer = Signer(name, data[4:])
    if signer.verifier.key_id != data[:4]:
        raise InvalidArgument("signer key: its id does not match its name and key")
    return signer


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise InvalidArgument("note text must end with a newline")
    if any(ord(ch) < 0x20 and ch != "\n" for ch in text):
        raise InvalidArgument("note text holds a control character")


def sign_note(text: str, *signers: Signer) -> str:
    """The signed note of ``text`` (which must end in a newline)."""
    _check_text(text)
    lines = []
    for signer in signers:
        signature = signer.verifier.key_id + signer.sign(text.encode())
        lines.append(f"{DASH} {signer.name} {base64.b64encode(signature).decode()}\n")
    return text + "\n" + "".join(lines)


def open_note(note: str, verifier: Verifier) -> str:
    """The text of ``note`` once ``verifier``'s signature on it checks; signatures of other
    keys are ignored, as the spec requires.

    Raises:
        InvalidArgument: malformed, not signed by that key, or its signature does not verify.
    """
    text, separator, signatures = note.rpartition("\n\n")
    if not separator or not signatures.endswith("\n"):
        raise InvalidArgument("not a signed note: no blank line before signature lines")
    text += "\n"
    _check_text(note)
    found = False
    for line in signatures[:-1].split("\n"):
        dash, _, rest = line.partition(" ")
        name, _, encoded = rest.partition(" ")
        if dash != DASH or not name or not encoded or " " in encoded:
            raise InvalidArgument(f"not a signed note: malformed signature line {line!r}")
        signature = _b64(encoded, "signature")
        if name != verifier.name or signature[:4] != verifier.key_id:
            continue
        if not verifier.is_valid(text.encode(), signature[4:]):
            raise InvalidArgument(f"the signature of {name} does not verify")
        found = True
    if not found:
        raise InvalidArgument(f"the note carries no signature of {verifier.name}")
    return text


@dataclass(frozen=True)
class TreeHead:
    """A tlog-checkpoint's text: who (origin), how many leaves, and their tree head."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        """The note text; InvalidArgument when the origin or an extension is not one line."""
        for line in (self.origin, *self.extensions):
            if not line or any(ord(ch) < 0x20 for ch in line):
                raise InvalidArgument(f"checkpoint line {line!r}: must be one non-empty line")
            _utf8(line, "checkpoint line")
        lines = (self.origin, str(self.size), base64.b64encode(self.root).decode())
        return "".join(f"{line}\n" for line in (*lines, *self.extensions))


def parse_checkpoint(text: str) -> TreeHead:
    """A checkpoint's text (the part a note signs).

    Raises:
        InvalidArgument: fewer than three lines, an empty line, a size that is not a decimal
            without leading zeros, or a root that is not base64 of 32 bytes.
    """
    if not text.endswith("\n"):
        raise InvalidArgument("checkpoint: must end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3 or not all(lines):
        raise InvalidArgument("checkpoint: needs origin, size and root, each on its own line")
    origin, size, encoded, *extensions = lines
    root = _b64(encoded, "checkpoint root")
    # At most 20 digits (a uint64, as the reference takes it): int() of more is refused.
    if len(size) > 20 or not _SIZE.fullmatch(size) or len(root) != 32:
        raise InvalidArgument("checkpoint: the size or the root is malformed")
    return TreeHead(origin, int(size), root, tuple(extensions))
