"""The checks of the redis-py scripts (tests/kv/redis_py_*.py): each one
compared, a failed one printed, and the count at the end."""
import redis


class Checks:
    def __init__(self):
        self.passed, self.failed = 0, 0

    def check(self, what, got, want):
        if got == want:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAILED {what}: got {got!r}, want {want!r}")

    @staticmethod
    def error_of(call):
        """The text of the redis-py error `call` raises, or None."""
        try:
            call()
            return None
        except redis.RedisError as e:
            return str(e)

    def finish(self):
        """Prints the last line, how many checks and failures; the exit status."""
        if self.failed == 0:
            print(f"redis-py: all {self.passed} checks ok")
        else:
            print(f"redis-py: {self.failed} of {self.passed + self.failed} checks FAILED")
        return 0 if self.failed == 0 else 1
