"""Messages from outside (API, CLI, MCP, JSONL files) -> records, checked before anything is written.

What ``Memory.add`` accepts as ``messages``:

- one message, or a list/tuple of messages;
- a message is a :class:`~memfrontier.core.types.Record` (kept, re-scoped to the call's scope),
  a string (one user turn), or a chat dict with ``content`` and optional ``role``,
  ``name``/``speaker``, ``timestamp`` and ``id``;
- ``content`` is a string, or a list of OpenAI content parts: ``{"type": "text", "text": ...}``
  parts are joined with newlines into the record's text, ``{"type": "image_url", "image_url":
  {"url": ...}}`` (or ``"image_url": "<url>"``) parts become the record's images.

Anything else (``None``, bytes, a number, a dict as content, an unknown part type, a non-string
role) raises ValueError naming the message's position and the field, before any record exists.

An image's url is kept as the record's image path (a ``data:`` URL is not kept): a local path is
read later (MemPilot shows the image to a model). Messages from the network (the REST service)
are first checked by :func:`check_network_images`: there, only ``http(s):`` and ``data:`` URLs
are accepted, so a caller never makes the server read its own files.
Timestamps are validated and normalised to aware UTC (:func:`~memfrontier.core.timeutil.canonical_timestamp`);
text is made valid Unicode (:func:`~memfrontier.core.text.clean_text`); ids are checked, never
altered (:func:`~memfrontier.core.text.check_id`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from urllib.parse import urlsplit

from .text import check_id, clean_text, require_non_blank
from .timeutil import canonical_timestamp
from .types import ImageRef, Record, Scope, record_id


def _field_text(value, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {type(value).__name__}")
    return clean_text(value)


#: The URL schemes an image from the network may have (:func:`check_network_images`).
NETWORK_IMAGE_SCHEMES = ("http", "https", "data")


def _image_url(part: Mapping, where: str) -> str:
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, Mapping) else ref
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"{where}: an image_url part needs a non-empty url")
    return clean_text(url.strip())


def _image(part: Mapping, where: str) -> ImageRef:
    url = _image_url(part, where)
    image_id = "img-" + hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    caption = part.get("caption", "")
    return ImageRef(
        id=image_id, caption=_field_text(caption, f"{where}.caption"), path=None if url[:5].lower() == "data:" else url
    )


def content_to_text(content, where: str = "content") -> tuple[str, list[ImageRef]]:
    """A message's ``content`` -> (text, images). See the module docstring for what is accepted;
    raises ValueError naming ``where`` for anything else."""
    if isinstance(content, str):
        return clean_text(content), []
    if isinstance(content, (list, tuple)):
        texts: list[str] = []
        images: list[ImageRef] = []
        for j, part in enumerate(content):
            at = f"{where}[{j}]"
            if isinstance(part, str):
                texts.append(clean_text(part))
                continue
            if not isinstance(part, Mapping):
                raise ValueError(f"{at} must be a content part (dict), got {type(part).__name__}")
            kind = part.get("type")
            if kind == "text":
                texts.append(_field_text(part.get("text"), f"{at}.text"))
            elif kind == "image_url":
                images.append(_image(part, at))
            else:
                raise ValueError(f"{at} has unsupported type {kind!r} (expected 'text' or 'image_url')")
        return "\n".join(t for t in texts if t), images
    if isinstance(content, (bytes, bytearray)):
        raise ValueError(f"{where} is bytes: decode it to str first")
    raise ValueError(f"{where} must be a string or a list of content parts, got {type(content).__name__}")


def check_network_images(messages) -> None:
    """Refuse an image of ``messages`` (what :func:`messages_to_records` takes) that is not an
    ``http://`` / ``https://`` URL with a host or a ``data:`` URL: a local path (``/etc/passwd``),
    a ``file:`` URL or any other scheme, which would make the server read its own disk. Raises
    ValueError naming the field (``message 0.content[1].image_url.url``); malformed messages are
    left to :func:`messages_to_records`. Used where messages come from the network (REST)."""
    try:
        listed = as_message_list(messages)
    except ValueError:
        return
    for i, m in enumerate(listed):
        content = m.get("content") if isinstance(m, Mapping) else None
        if not isinstance(content, (list, tuple)):
            continue
        for j, part in enumerate(content):
            if not (isinstance(part, Mapping) and part.get("type") == "image_url"):
                continue
            where = f"message {i}.content[{j}].image_url" + (
                ".url" if isinstance(part.get("image_url"), Mapping) else ""
            )
            url = _image_url(part, f"message {i}.content[{j}]")
            try:
                parts = urlsplit(url)
            except ValueError:
                parts = None
            scheme = parts.scheme.lower() if parts else ""
            if scheme not in NETWORK_IMAGE_SCHEMES or (scheme != "data" and not parts.netloc):
                raise ValueError(
                    f"{where}: {url[:80]!r} is not an http(s): or data: URL (a local path or another "
                    f"scheme is not accepted over the service)"
                )


def as_message_list(messages) -> list:
    """``messages`` as a list: one string, dict or Record is one message; a list/tuple is kept."""
    if isinstance(messages, (str, Mapping, Record)):
        return [messages]
    if isinstance(messages, (list, tuple)):
        return list(messages)
    raise ValueError(
        f"messages must be a string, a chat dict, a Record or a list of them; got {type(messages).__name__}"
    )


#: Keys a chat dict may not carry: a record's scope is the add call's (a message naming another
#: user would otherwise be stored silently under the caller's).
SCOPE_KEYS = ("user_id", "agent_id", "run_id")


def messages_to_records(messages, *, scope: Scope, session_id: str, timestamp=None) -> list[Record]:
    """Normalise ``messages`` (see the module docstring) into records with deterministic ids
    (:func:`~memfrontier.core.types.record_id`), all validated before the first is returned.

    ``timestamp`` is the default for messages without their own. Raises ValueError naming the
    message (``message 2``) and field for malformed input, an unreadable timestamp, an empty or
    blank ``timestamp``, ``role``, ``id`` or ``session_id`` (absent is None or a missing key), a
    ``content`` with neither text nor an image, a message carrying a scope id (:data:`SCOPE_KEYS`),
    and an ``id`` or ``session_id`` holding NUL or a lone surrogate (:func:`~memfrontier.core.text.check_id`).
    """
    check_id(session_id, "session_id")
    default_ts = canonical_timestamp(timestamp, what="timestamp")
    out: list[Record] = []
    for i, m in enumerate(as_message_list(messages)):
        where = f"message {i}"
        if isinstance(m, Record):
            out.append(m if m.scope == scope or scope == Scope() else m.model_copy(update={"scope": scope}))
            continue
        if isinstance(m, str):
            m = {"role": "user", "content": m}
        if not isinstance(m, Mapping):
            raise ValueError(f"{where} must be a Record, a string or a dict with 'content'; got {type(m).__name__}")
        if "content" not in m:
            raise ValueError(f"{where} has no 'content'")
        if scoped := [k for k in SCOPE_KEYS if k in m]:  # read nowhere: the call's scope is the record's
            raise ValueError(
                f"{where} has {', '.join(scoped)}: a message carries no scope; give user_id, agent_id or "
                "run_id to the call that adds it"
            )
        text, images = content_to_text(m["content"], f"{where}.content")
        if not text.strip() and not images:
            raise ValueError(f"{where}.content is {'empty' if not text else 'blank'}: a message needs text or an image")
        role = require_non_blank(_field_text(m.get("role", "user"), f"{where}.role"), f"{where}.role")
        speaker_raw = m.get("speaker") or m.get("name") or role
        speaker = _field_text(speaker_raw, f"{where}.speaker")
        ts = (
            canonical_timestamp(m["timestamp"], what=f"{where}.timestamp")
            if m.get("timestamp") is not None
            else default_ts
        )
        rid = m.get("id")
        if rid is not None:
            rid = clean_text(check_id(rid, f"{where}.id"))  # refused, not altered; then NFC as stored text
        rid = rid or record_id(scope, session_id, i, speaker, text, ts)
        out.append(
            Record(
                id=rid,
                scope=scope,
                session_id=session_id,
                speaker=speaker,
                role=role,
                timestamp=ts,
                text=text,
                images=images,
            )
        )
    return out
