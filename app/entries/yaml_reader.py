"""The front-matter's YAML, read with the file line of every field.

Anchors, aliases and nesting past `MAX_YAML_DEPTH` are refused at the parser event where they
appear, before any value is built, so an alias bomb never expands and deep nesting never recurses;
every refusal and every value error carries its mark (its line).
"""

from typing import TYPE_CHECKING, Any, cast

import yaml

if TYPE_CHECKING:
    from yaml._yaml import Mark as _CMark

MAX_YAML_DEPTH = 20  # nested lists and mappings, the top-level mapping counted; real entries use 3


class _LinedValueErrors:
    """Value errors of the constructor (int() past 4300 digits, 2020-13-45) carry their line."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)  # type: ignore[misc]
        except (ValueError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this value: {exc}", node.start_mark
            ) from None


class _PyFrontMatterLoader(_LinedValueErrors, yaml.SafeLoader):
    pass


_FrontMatterLoader: type = _PyFrontMatterLoader
if hasattr(yaml, "CSafeLoader"):  # libyaml's parser: ~10x faster, same events

    class _CFrontMatterLoader(_LinedValueErrors, yaml.CSafeLoader):
        pass

    _FrontMatterLoader = _CFrontMatterLoader


def _mark(mark: "yaml.error.Mark | _CMark | None") -> yaml.error.Mark | None:
    """libyaml's events carry its own Mark class; it has the same name, line and column as
    PyYAML's, all that the nodes and errors built from it read (PyYAML's CLoader does the same)."""
    return cast(yaml.error.Mark | None, mark)


class _Refused(yaml.MarkedYAMLError):
    """Front-matter that is valid YAML but not allowed: anchors, aliases, deep nesting."""

    def __init__(self, problem: str, event: yaml.Event) -> None:
        super().__init__(problem=problem, problem_mark=_mark(event.start_mark))


def _compose_node(loader: Any, depth: int) -> yaml.Node:
    """PyYAML's composer, refusing anchors, aliases and deep nesting at the event they appear,
    before any value is built: an alias bomb never expands, deep nesting never recurses."""
    event = loader.get_event()
    if isinstance(event, yaml.AliasEvent):
        raise _Refused(
            f"alias *{event.anchor} is not allowed in the front-matter: write the value out",
            event,
        )
    if event.anchor is not None:
        raise _Refused(
            f"anchor &{event.anchor} is not allowed in the front-matter: write each value out",
            event,
        )
    if isinstance(event, yaml.ScalarEvent):
        tag = event.tag
        if tag is None or tag == "!":
            tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        return yaml.ScalarNode(
            tag, event.value, _mark(event.start_mark), _mark(event.end_mark), style=event.style
        )
    if depth > MAX_YAML_DEPTH:
        raise _Refused(
            f"lists and mappings nest more than {MAX_YAML_DEPTH} levels deep here", event
        )
    node: yaml.CollectionNode
    if isinstance(event, yaml.SequenceStartEvent):
        tag = event.tag
        if tag is None or tag == "!":
            tag = loader.resolve(yaml.SequenceNode, None, event.implicit)
        node = yaml.SequenceNode(
            tag, [], _mark(event.start_mark), None, flow_style=event.flow_style
        )
        while not loader.check_event(yaml.SequenceEndEvent):
            node.value.append(_compose_node(loader, depth + 1))
    else:
        assert isinstance(event, yaml.MappingStartEvent), event
        tag = event.tag
        if tag is None or tag == "!":
            tag = loader.resolve(yaml.MappingNode, None, event.implicit)
        node = yaml.MappingNode(tag, [], _mark(event.start_mark), None, flow_style=event.flow_style)
        while not loader.check_event(yaml.MappingEndEvent):
            key = _compose_node(loader, depth + 1)
            node.value.append((key, _compose_node(loader, depth + 1)))
    node.end_mark = loader.get_event().end_mark
    return node


def _load_front_matter(yaml_text: str) -> tuple[yaml.Node | None, Any]:
    """The front-matter's node tree and its value; raises MarkedYAMLError with a mark."""
    loader = _FrontMatterLoader(yaml_text)
    try:
        loader.get_event()  # stream start
        if loader.check_event(yaml.StreamEndEvent):
            return None, None
        loader.get_event()  # document start
        node = _compose_node(loader, 1)
        loader.get_event()  # document end
        if not loader.check_event(yaml.StreamEndEvent):
            raise _Refused("the front-matter must be one YAML document", loader.get_event())
        return node, loader.construct_document(node)
    finally:
        loader.dispose()


def _walk_lines(node: yaml.Node, path: tuple, offset: int, lines: dict, dupes: list) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            line = key_node.start_mark.line + offset
            if key in seen:
                dupes.append((line, ".".join(map(str, (*path, key)))))
            seen.add(key)
            lines[(*path, key)] = line
            _walk_lines(value_node, (*path, key), offset, lines, dupes)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + offset
            _walk_lines(item, (*path, index), offset, lines, dupes)
