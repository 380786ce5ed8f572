"""``python -m schedsim`` (also the entry under ``torchrun -m schedsim execute``)."""

from schedsim.cli import main

if __name__ == "__main__":
    main()
