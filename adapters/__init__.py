"""The edge of foldline, in seven wings that import only the wings below them (ADR 0045).

From the top: ``cli``; ``programs`` beside ``front``; ``http``; ``services``; ``settings``;
``system`` (``tests/arch/test_wings.py`` checks the order). This root holds nothing else and
imports nothing.
"""
