"""HTTP deadlines' transports: one shared SSL context for default certificate checks."""

from __future__ import annotations

import ssl

from deepresearch_dagster.core.web.deadline import deadline_transport, deadline_transport2


def _context(transport) -> ssl.SSLContext | None:
    return transport._pool._ssl_context


def test_default_transports_share_one_ssl_context_per_stack_and_trust_setting():
    assert _context(deadline_transport()) is _context(deadline_transport())
    assert _context(deadline_transport2()) is _context(deadline_transport2())
    assert _context(deadline_transport(trust_env=False)) is not _context(deadline_transport())
    own = ssl.create_default_context()
    assert _context(deadline_transport(verify=own)) is own  # what a caller passes is kept
    unchecked = _context(deadline_transport(verify=False))
    assert unchecked is not _context(deadline_transport()) and unchecked.verify_mode == ssl.CERT_NONE
