"""Text from others (labels, record ids, errors, a receiver's answer) as a terminal is shown it."""


def shown(text: str) -> str:
    """`text` with every character that is not printable (controls, escape sequences' ESC, line
    breaks) written as a Python escape, so a terminal shows it rather than obeys it."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
