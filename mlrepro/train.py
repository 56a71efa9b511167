"""``python -m mlrepro.train ...``: the training entry point every mini ``run_and_time.sh`` ends in, published
packages included; the loop itself is :mod:`mlrepro.training.loop`."""

from mlrepro.training.loop import main

if __name__ == "__main__":
    main()
