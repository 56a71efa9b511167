from mlrepro.reproduce.cli import main

main()
