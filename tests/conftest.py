import sys
from pathlib import Path

# tests/_brute.py is a helper module of the tests, imported as `_brute`.
sys.path.insert(0, str(Path(__file__).parent))
