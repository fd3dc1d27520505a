from kopt_core.cli import main

main()
