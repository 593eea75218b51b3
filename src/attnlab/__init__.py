"""attnlab: the library of the course "Attention, from Bahdanau to FlashAttention".

Support modules (quiz, checks, plots, data, bench) are ready to use. Exercise modules (see
``attnlab.lessons``) are the ones you fill in, lesson by lesson; ``use_reference`` borrows the
course's version of one you have not written yet.
"""

from attnlab import glossary, progress
from attnlab.start import start_lesson
from attnlab.switch import install as _install
from attnlab.switch import source_of, use_own, use_reference

__all__ = ["glossary", "progress", "start_lesson", "use_reference", "use_own", "source_of"]
__version__ = "0.1.0"

_install()
