"""Llama 4's chunked attention under context parallelism: where Megatron Bridge's Llama4SelfAttention runs it as
the model attends (layout/validate.py validate_workload refuses the rest)."""

from moetune.specs.model import ModelSpec


def chunk_refusal(spec: ModelSpec, seq: int, cp: int) -> str | None:
    """Llama 4's chunked attention under CP (None: it runs as the model attends). Megatron Bridge's
    Llama4SelfAttention (llama4_utils.py) reads the sequence length off the query, which holds this CP rank's seq / CP
    tokens (gpt_step.py slices an unpacked batch with get_batch_on_this_cp_rank before the model): past the chunk it
    asserts that length over 2 x CP is whole attention chunks, so seq must be a multiple of 2 x CP^2 x chunk; at or
    under the chunk it chunks nothing, and attention would span the whole sequence, not the model's chunks."""
    chunk = spec.attention_chunk
    if not chunk or cp == 1 or seq <= chunk or _cp_chunks_whole(seq, cp, chunk):
        return None
    local = seq // cp
    ok = [c for c in range(2, seq // chunk + 1) if seq % (2 * c) == 0 and _cp_chunks_whole(seq, c, chunk)]
    why = (f"each CP rank's {local} tokens over 2 x CP ({local // (2 * cp)}) must be whole chunks (Megatron Bridge "
           "llama4_utils.py asserts on the rank's own sequence)" if local > chunk else
           f"each CP rank's {local} tokens are not past the chunk, so Megatron Bridge (llama4_utils.py) chunks "
           f"nothing and attention would span all {seq} tokens")
    return (f"{spec.name} attends within {chunk}-token chunks: at CP {cp} {why}; use "
            + (f"a CP among {', '.join(map(str, ok))}" if ok else "no CP") + " at this --seq")


def _cp_chunks_whole(seq: int, cp: int, chunk: int) -> bool:
    """Whether Llama4SelfAttention chunks a CP rank's seq / CP tokens and its assert holds (chunk_refusal)."""
    local = seq // cp
    return local > chunk and local % (2 * cp) == 0 and (local // (2 * cp)) % chunk == 0
