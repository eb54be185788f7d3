"""`python -m hotpin run -- python train.py`: the same as `hotpin run -- python train.py`."""
import os
import sys

from hotpin import executable


def main():
    path = executable("hotpin")
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
