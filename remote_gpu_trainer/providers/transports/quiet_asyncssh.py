"""asyncssh, imported without the warnings it makes cryptography print.

cryptography 47+ deprecates DSA and warns (CryptographyDeprecationWarning, on stderr) on each touch of its DSA
classes. asyncssh touches them at import (its type hints name them: about ten lines before rgt says a word) and
again whenever it reads a DSA key, which it does for every connection of a user who still has an old
`~/.ssh/id_dsa` (asyncssh loads the default keys, and rgt lets it). rgt never offers DSA; none of that is
something the user caused (issue 26, item 14).

So, before asyncssh is first imported, exactly those warnings are filtered, for the whole process: cryptography's
DSA deprecation when the code that touched DSA is asyncssh's own. Any other warning, asyncssh's other ones,
cryptography's other ones, and a DSA warning raised from anywhere else (rgt's own code included), shows as
Python would show it. Every module of rgt that needs asyncssh imports it from here.
"""

import warnings

from cryptography.utils import CryptographyDeprecationWarning

warnings.filterwarnings("ignore", message=r"DSA is deprecated", category=CryptographyDeprecationWarning,
                        module=r"asyncssh(\.|$)")

import asyncssh  # noqa: E402 - the filter above must be in place before asyncssh's import runs

__all__ = ["asyncssh"]
