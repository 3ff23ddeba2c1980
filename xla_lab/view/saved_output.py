"""What a notebook keeps of a ``%%xla`` cell's output, and how small it is.

Every output is saved in the .ipynb. A full output carries the panel model under the capture MIME type,
so a notebook reopened without a kernel, or exported, still draws every view; a static ``text/plain``
and ``text/html`` go beside it for viewers without the extension. The model is reduced first (below),
then packed: gzip, base64 in a JSON string, inflated in the browser with ``DecompressionStream``
(``extension/src/core/packed.ts``). The packed payload keeps the run's key (cell, count, start time)
readable, so the side panel can tell runs apart without inflating them. A summary-only output
(``%xla save summary`` for the rest of the session, ``%%xla --save summary`` for one cell, or
``XLA_LAB_SAVE=summary``) carries the text and the HTML summary only: for notebooks that are shared.
"""

from __future__ import annotations

import base64
import gzip
import json

from xla_lab.hlo.parser import strip_metadata

SUMMARY_MIME = "application/vnd.xla-lab.summary+json"  # marks a summary-only output (for the extension)
PACKING = "gzip+base64"
MAX_UNPACKED_BYTES = 512 * 1024 * 1024  # a payload claiming more is refused (an untrusted notebook)


class PackedPayloadError(ValueError):
    """A packed payload that cannot be read back."""


def packed_payload(model: dict) -> dict:
    """The saved payload (``saved_payload``) gzipped into one base64 string: about a tenth of the JSON (level 6: 0.4 s for a 12-layer model's cell; level 9 took 0.8 s)."""
    saved = saved_payload(model)
    text = json.dumps(saved, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    capture = saved.get("capture") or {}
    return {
        "schema": saved.get("schema"),
        "packed": PACKING,
        "key": {k: capture.get(k) for k in ("cell_id", "execution_count", "started_at")},
        "bytes": len(text),
        "data": base64.b64encode(gzip.compress(text, compresslevel=6, mtime=0)).decode("ascii"),
    }


def unpacked_payload(payload: dict) -> dict:
    """The panel model of a saved output, packed or not (Python's reader of what the browser reads)."""
    if not isinstance(payload, dict) or "packed" not in payload:
        return payload
    if payload.get("packed") != PACKING:
        raise PackedPayloadError(f"unknown packing {payload.get('packed')!r}")
    size = payload.get("bytes")
    if not isinstance(size, int) or not 0 <= size <= MAX_UNPACKED_BYTES:
        raise PackedPayloadError(f"a packed capture must say its size (at most {MAX_UNPACKED_BYTES} bytes)")
    try:
        raw = gzip.decompress(base64.b64decode(payload.get("data") or "", validate=True))
    except (ValueError, OSError, EOFError) as exc:
        raise PackedPayloadError(f"the packed capture is damaged: {exc}") from None
    if len(raw) != size:
        raise PackedPayloadError(f"the packed capture inflates to {len(raw)} bytes, not {size}")
    return json.loads(raw)


# The output's capture payload is saved in the notebook, once per %%xla cell. XLA's HLO text is mostly
# per-instruction metadata (long source paths), and the raw buffer assignment / memory report /
# signature are already summarised in ``memory`` and the recompile reasons (the IR text and per-node
# info in ``graphs``; each compile profile in the model's ``compile``), so the saved copy drops them, strips the metadata (kernels keep their lines in ``fusions``) and keeps at most this much of
# each HLO text. The live widget's model keeps everything.
SAVED_HLO_CHARS = 200_000
NOT_SAVED = ("buffer_assignment", "memory_report", "signature", "compile_profile")


def saved_payload(model: dict) -> dict:
    """The panel model as a notebook output keeps it (see above); the input is not changed."""
    capture = dict(model["capture"])
    artifacts = {}
    for h, art in (capture.get("artifacts") or {}).items():
        art = {k: v for k, v in art.items() if k not in NOT_SAVED}
        if not art.get("spmd"):  # the model's "graphs" carry the nodes; the IR text only names
            art.pop("ir_text", None)  # inputs for the Sharding tab's node details
        art.pop("node_info", None)  # already folded into "graphs"
        for key in ("hlo_before", "hlo_after"):
            if isinstance(art.get(key), str):
                art[key] = _trimmed_hlo(art[key])
        artifacts[h] = art
    capture["artifacts"] = artifacts
    return {**model, "capture": capture}


def _trimmed_hlo(text: str) -> str:
    """Metadata stripped; if still too long, the module header and the ENTRY computation (what runs)
    are kept whole and the other computations (fused bodies, reducers) as far as room allows."""
    text = strip_metadata(text)
    if len(text) <= SAVED_HLO_CHARS:
        return text
    blocks = text.split("\n\n")
    entry = next((i for i, b in enumerate(blocks) if b.lstrip().startswith("ENTRY")), len(blocks) - 1)
    keep = {0, entry}
    room = SAVED_HLO_CHARS - len(blocks[0]) - len(blocks[entry])
    for i, block in enumerate(blocks):
        if i not in keep and len(block) + 2 <= room:
            keep.add(i)
            room -= len(block) + 2
    dropped = len(blocks) - len(keep)
    note = (f"// {dropped} computations (fused bodies, reducers) not saved in the notebook: the live panel, "
            "xla_lab.last().steps[i].hlo_after and %xla report have all of it")
    kept = [b for i, b in enumerate(blocks) if i in keep]
    return "\n\n".join(kept[:1] + [note] + kept[1:])
