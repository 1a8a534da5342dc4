"""The matplotlib backend of isolation workers (``MPLBACKEND=module://kerasmagic.isolation.child.mpl_backend``).

Agg rendering (no display in a worker); ``plt.show()`` sends the open figures to the kernel
as PNG, as the inline backend does in a notebook.
"""

from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg

from .child_display import send_open_figures

FigureCanvas = FigureCanvasAgg
FigureManager = FigureManagerBase


def show(*args, **kwargs) -> None:
    send_open_figures()
