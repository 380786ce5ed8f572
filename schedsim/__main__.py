"""``python -m schedsim`` (also the entry under ``torchrun -m schedsim execute``)."""

if __name__ == "__main__":
    from schedsim.cli import main

    main()
