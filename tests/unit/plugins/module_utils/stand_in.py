"""A stand-in for AnsibleModule in the unit tests of a module's run_module and its steps."""


class Exit(Exception):
    """Raised by exit_json and fail_json, which end the module."""


class StandInModule:
    """params: an ARGUMENT_SPEC's defaults with the given ones over them; exit_json and fail_json keep
    the result (fail_json adds failed=True) and raise Exit."""

    def __init__(self, spec, check_mode=False, **params):
        self.params = dict({name: option.get("default") for name, option in spec.items()}, **params)
        self.check_mode = check_mode
        self.result = None
        self.warnings = []

    def warn(self, warning):
        self.warnings.append(warning)

    def exit_json(self, **result):
        self.result = result
        raise Exit()

    def fail_json(self, **result):
        self.result = dict(result, failed=True)
        raise Exit()
