package guard

// Tier is how far a send is trusted: it decides which automatic abuse
// rules judge it (abuseRules).
type Tier int

// The tiers of a send.
const (
	// TierNew is an untrusted send: every automatic rule judges it.
	TierNew Tier = iota
	// TierSolved solved a challenge (challenge.go): a tier of its own, not
	// trust. Its own cap per country and hour replaces the automatic rules.
	TierSolved
	// TierTrusted is a send to a trusted number.
	TierTrusted
)
