"""A URLconf that cannot be loaded: the view check must report nothing for it (Django's
own URL check says what is wrong), rather than crash."""

raise RuntimeError("this URLconf cannot be loaded (a test of the view check)")
