"""Source-line tracking in ``auto`` mode (``capture/instrument.py``): it pauses once a loop is steady and
resumes after a compile, and a steady loop's later syncs leave torch_xla's switch alone (the sync hook
runs this on every step)."""

from xla_lab.capture.instrument import LineTracking


def test_line_tracking_pauses_once_and_resumes_after_a_compile():
    tracking = LineTracking("auto")
    switched = []
    set_switch = tracking._set

    def counting(on):
        switched.append(on)
        set_switch(on)

    tracking._set = counting
    try:
        tracking.start()
        for _ in range(6):
            tracking.after_sync(compiled=False, executed=True)
        tracking.after_sync(compiled=True, executed=True)
        for _ in range(4):
            tracking.after_sync(compiled=False, executed=True)
        assert switched == [True, False, True, False] and tracking.paused
    finally:
        tracking.stop()
    assert switched[-1] is True and not tracking.paused
