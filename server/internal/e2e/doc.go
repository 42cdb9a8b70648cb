// Package e2e holds end-to-end tests of the BAP HTTP API driving a real headless Chromium against
// fixture pages on 127.0.0.1, over a real PostgreSQL: the whole stack the daemon wires (api, app,
// store, browser), in one process. It has no non-test code.
package e2e
