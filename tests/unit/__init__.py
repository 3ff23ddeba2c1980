# A package, so a module here may share its name with one in tests/kernel (test_json.py: the pure half).
