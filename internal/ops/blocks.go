package ops

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// Limits on one page of the blocked list. Paging deep into a list that
// long is a search: filter instead.
const (
	DefaultBlockLimit = 50
	MaxBlockLimit     = 500
	MaxBlockOffset    = 100000
)

// BlockedNumber is one row of the blocked list: a block from the index, or
// a deny-list entry (Reason problem.CodeDenied, Phone the entry's pattern, which may
// be a prefix, and Until zero when the entry never expires).
type BlockedNumber struct {
	guard.Block
	Since time.Time        // when the block was noted, or the entry created
	Deny  *guard.DenyEntry // the deny-list entry, for Reason CodeDenied
}

// BlockIndex is the guard.Blocks index as the ops desk uses it: it lists what is
// blocked and lifts a block.
type BlockIndex interface {
	guard.Blocks
	// ListBlocks returns the live blocks whose phone passes match (all of
	// them when match is nil), most recently noted first: the first n, and
	// how many passed in all.
	ListBlocks(ctx context.Context, match func(phone string) bool, n int) ([]BlockedNumber, int, error)
	// Unblock deletes the counters of phone, its code of the default
	// service and of each of services (and with them a verify lock-out)
	// and its index entry.
	Unblock(ctx context.Context, phone string, counters []limit.Key, services ...string) error
}

// BlockFilter selects rows of the blocked list. Zero fields do not filter.
type BlockFilter struct {
	// Phone is a number or the start of one in E.164 ("+9198"). A deny-list
	// prefix is listed when it covers the number, or begins with it.
	Phone   string
	Country string // ISO 3166-1 alpha-2
	Limit   int    // 0 means DefaultBlockLimit; at most MaxBlockLimit
	Offset  int
	// SkipDeny leaves the deny-list entries out (the ops page lists them
	// in their own section).
	SkipDeny bool
}

// BlockPage is one page of the blocked list and the size of the whole.
type BlockPage struct {
	Blocks []BlockedNumber
	Total  int
}

// normalize checks f and turns its phone into E.164 digits.
func (f BlockFilter) normalize() (BlockFilter, error) {
	if f.Phone != "" {
		p := strings.Map(func(r rune) rune {
			if r == ' ' || r == '-' || r == '(' || r == ')' || r == '.' {
				return -1
			}
			return r
		}, f.Phone)
		if guard.ValidateDenyPattern(p) != nil {
			return f, problem.Errorf(problem.CodeInvalidRequest, "phone must be a number or its start in E.164, like +919800000000 or +9198")
		}
		f.Phone = p
	}
	if f.Country != "" {
		f.Country = strings.ToUpper(f.Country)
		if len(f.Country) != 2 || f.Country[0] < 'A' || f.Country[0] > 'Z' || f.Country[1] < 'A' || f.Country[1] > 'Z' {
			return f, problem.Errorf(problem.CodeInvalidRequest, "country must be an ISO 3166-1 alpha-2 code, like IN")
		}
	}
	switch {
	case f.Limit < 0 || f.Limit > MaxBlockLimit:
		return f, problem.Errorf(problem.CodeInvalidRequest, "limit must be between 1 and %d", MaxBlockLimit)
	case f.Limit == 0:
		f.Limit = DefaultBlockLimit
	}
	if f.Offset < 0 || f.Offset > MaxBlockOffset {
		return f, problem.Errorf(problem.CodeInvalidRequest, "offset must be between 0 and %d", MaxBlockOffset)
	}
	return f, nil
}

// matchNumber reports whether a blocked number passes f.
func (f BlockFilter) matchNumber(phone string) bool {
	if f.Phone != "" && !strings.HasPrefix(phone, f.Phone) {
		return false
	}
	if f.Country != "" && regionOf(phone) != f.Country {
		return false
	}
	return true
}

// matchDeny reports whether a deny-list entry passes f: its pattern covers
// the phone asked for (or begins with it), and it can block numbers of the
// country asked for.
func (f BlockFilter) matchDeny(e guard.DenyEntry) bool {
	if f.Phone != "" && !strings.HasPrefix(f.Phone, e.Pattern) && !strings.HasPrefix(e.Pattern, f.Phone) {
		return false
	}
	if f.Country != "" && !slices.Contains(patternRegions(e.Pattern), f.Country) {
		return false
	}
	return true
}

// regionOf is the region of an E.164 number, "" when it has none.
func regionOf(e164 string) string {
	p, err := guard.ParsePhone(e164, "")
	if err != nil {
		return ""
	}
	return p.Region
}

// patternRegions lists the regions whose numbers a deny pattern can match:
// the number's own region for a whole number, else every region of the
// country calling code the pattern begins with (+1 is US, CA and more).
func patternRegions(pattern string) []string {
	if r := regionOf(pattern); r != "" {
		return []string{r}
	}
	digits := strings.TrimPrefix(pattern, "+")
	for n := 1; n <= 3 && n <= len(digits); n++ {
		cc, err := strconv.Atoi(digits[:n])
		if err != nil {
			return nil
		}
		if regions := phonenumbers.GetRegionCodesForCountryCode(cc); len(regions) > 0 {
			return regions
		}
	}
	return nil
}

// mergeBlocked puts index blocks and deny entries into one list, most
// recent first, and cuts the page [offset, offset+limit) out of it.
func mergeBlocked(blocks []BlockedNumber, denies []guard.DenyEntry, offset, limit int) []BlockedNumber {
	all := slices.Clone(blocks)
	for i := range denies {
		e := denies[i]
		b := BlockedNumber{
			Block: guard.Block{Phone: e.Pattern, Country: regionOf(e.Pattern), Reason: problem.CodeDenied},
			Since: e.CreatedAt,
			Deny:  &e,
		}
		if e.ExpiresAt != nil {
			b.Until = *e.ExpiresAt
		}
		all = append(all, b)
	}
	slices.SortStableFunc(all, func(a, b BlockedNumber) int { return b.Since.Compare(a.Since) })
	if offset >= len(all) {
		return []BlockedNumber{}
	}
	return all[offset:min(offset+limit, len(all))]
}

// PatternRegions lists the regions whose numbers a deny pattern can match
// (the ops page shows a prefix's country with it).
func PatternRegions(pattern string) []string { return patternRegions(pattern) }

// WholeCountries lists the regions a deny pattern refuses entirely: the
// pattern is a country calling code (+1, +44) or shorter than one (+2
// covers +20, +27, +211, ...). Empty for any narrower pattern. The ops
// page asks for an explicit confirmation before deny-listing those.
func WholeCountries(pattern string) []string {
	digits := strings.TrimPrefix(pattern, "+")
	if digits == "" || len(digits) > 3 || !strings.HasPrefix(pattern, "+") {
		return nil
	}
	var codes []int
	for cc := range phonenumbers.GetSupportedCallingCodes() {
		if strings.HasPrefix(strconv.Itoa(cc), digits) {
			codes = append(codes, cc)
		}
	}
	slices.Sort(codes)
	var out []string
	for _, cc := range codes {
		out = append(out, phonenumbers.GetRegionCodesForCountryCode(cc)...)
	}
	return out
}
