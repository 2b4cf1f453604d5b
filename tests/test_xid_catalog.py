from forensics.xid import xid_catalog, xid_frame


def test_required_fatal_codes_are_fatal_hardware():
    for code in (48, 64, 74, 79, 94, 95, 119, 120):
        info = xid_catalog().get(code)
        assert info is not None and info.fatal, code
        assert info.category == "HARDWARE" and info.severity == "critical" and info.role == "initiating"


def test_informational_and_follow_on_codes_are_not_fatal():
    assert not xid_catalog().get(63).fatal  # NVIDIA: IGNORE; the pending remap is reported from -q instead
    assert xid_catalog().get(45).role == "cascade" and not xid_catalog().get(45).fatal
    assert xid_catalog().get(13).category == "CUDA_ERROR"


def test_frame_matches_catalog():
    frame = xid_frame()
    assert frame.height == len(xid_catalog())
    assert frame["xid"].is_unique().all()
    assert xid_catalog().get(99999) is None
