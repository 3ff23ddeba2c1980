# A package, so a module here may share its name with one in tests/unit (test_json.py: the kernel half).
