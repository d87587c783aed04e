"""String ops: StringConcat, RegexFullMatch, StringSplit, StringNormalizer (``nnvm/ops/text.py``).
String tensors are the NNVM ``string`` dtype (object arrays of ``str``)."""

from __future__ import annotations

from ..registry import converter


@converter("StringConcat", since=20, requires=("string_concat",))
def _string_concat(ctx, node):
    return [ctx.op("string_concat", ctx.input(0), ctx.input(1))]


@converter("RegexFullMatch", since=20, requires=("regex_full_match",))
def _regex_full_match(ctx, node):
    return [ctx.op("regex_full_match", ctx.input(0), pattern=ctx.attr("pattern"))]


@converter("StringSplit", since=20, requires=("string_split",))
def _string_split(ctx, node):
    return ctx.op_multi("string_split", ctx.input(0), delimiter=ctx.attr("delimiter", ""),
                        maxsplit=ctx.attr("maxsplit", None))


@converter("StringNormalizer", since=10, requires=("string_normalizer",))
def _string_normalizer(ctx, node):
    return [ctx.op("string_normalizer", ctx.input(0),
                   case_change_action=ctx.attr("case_change_action", "NONE"),
                   is_case_sensitive=bool(ctx.attr("is_case_sensitive", 0)),
                   stopwords=tuple(ctx.attr("stopwords", [])),
                   locale=ctx.attr("locale", ""))]
