"""asyncssh, imported without the warning it makes cryptography print.

asyncssh, at import, touches cryptography's DSA classes, and cryptography 47+ warns about DSA on each touch
(CryptographyDeprecationWarning, on stderr). rgt never offers DSA keys; the warning is the library's, not
something the user caused, so every module of rgt that needs asyncssh imports it from here, where that one
import runs with warnings silenced.
"""

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import asyncssh

__all__ = ["asyncssh"]
