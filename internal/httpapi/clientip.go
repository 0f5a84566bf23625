package httpapi

import (
	"net"
	"net/http"
	"net/netip"

	"github.com/labstack/echo/v4"
)

// clientIP is how the server learns a caller's address (c.RealIP): for
// the ops sign-in limiter, the API-key limiter and the audit trail.
//
// With no trusted proxies, no forwarding header is believed: the peer
// address is the client. Otherwise only a peer inside trusted may name its
// client, by X-Forwarded-For (the right-most hop that is not a trusted
// proxy: the left ones are whatever the client wrote) or, without it,
// X-Real-IP. echo's extractors do the parsing; loopback and private
// networks are trusted only when listed, since any process on them (an app
// server, say) could otherwise rotate or forge the address it is limited by.
func clientIP(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		p = p.Masked()
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	xff, realIP := echo.ExtractIPFromXFFHeader(opts...), echo.ExtractIPFromRealIPHeader(opts...)
	return func(r *http.Request) string {
		if len(r.Header.Values(echo.HeaderXForwardedFor)) > 0 {
			return xff(r)
		}
		return realIP(r)
	}
}
