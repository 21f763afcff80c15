"""The book's colours, in one place: Okabe and Ito's palette, and a few greys.

Okabe and Ito chose these eight colours to stay distinct for readers with
any common form of colour blindness ("Color Universal Design", 2002), which
is why every picture of the book draws ranks, buckets, GPUs and curves with
them. A drawing module names the colours it uses (``BLUE``, ``ORANGE``) and
orders them as its picture needs; only a shade that one picture alone uses
is written where it is used.

Every picture of the book (Chapters 2 to 15, Lab 1) takes its colours from here.
"""

# Okabe-Ito, in their own order.
ORANGE = "#E69F00"
SKY_BLUE = "#56B4E9"
GREEN = "#009E73"
YELLOW = "#F0E442"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
PURPLE = "#CC79A7"
GREY = "#999999"
BLACK = "#000000"

OKABE_ITO = (ORANGE, SKY_BLUE, GREEN, YELLOW, BLUE, VERMILLION, PURPLE, GREY)

# One colour per collective wherever a picture draws several side by side
# (Chapter 15e's bytes per mesh dimension, 15f's 2-D step), so that a reader
# who learnt "sky blue is an all-gather" in one chapter reads the next alike.
COLLECTIVE_COLOURS = {"all_gather": SKY_BLUE, "reduce_scatter": ORANGE, "all_reduce": GREEN}
# ... and one name, as the prose writes it ("all-gather", not torch's all_gather).
COLLECTIVE_LABELS = {"all_gather": "all-gather", "reduce_scatter": "reduce-scatter", "all_reduce": "all-reduce"}

# Greys for text, edges and backgrounds, darkest first.
INK = "#222222"          # titles
TEXT = "#333333"         # labels
MUTED_TEXT = "#555555"   # secondary labels
EDGE = "#888888"         # box outlines
FAINT = "#DDDDDD"        # grid lines, "held by several ranks"
PANEL = "#F4F4F4"        # the background of a node, a rank, a box
ERROR_RED = "#B3261E"    # what is wrong (padding, a mistake)
