// Package page is the vocabulary of browser work shared by the use-cases and the browser adapter:
// the requests and results of navigate, observe, query, act and extract, and the errors callers
// branch on. It holds values only — opaque BAP ids (ctx_, ep_, nd_), never a CDP id — and imports
// only the standard library, so the app layer can speak it without depending on chromedp.
package page
