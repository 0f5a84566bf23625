package simulate

// DefaultPrices are USD per SMS by country: rounded public list prices of
// one large provider for an OTP message, for orders of magnitude only; a
// scenario's prices replace them country by country. 001 is the
// international networks (+870, +881, +882, +883).
var DefaultPrices = map[string]float64{
	"001": 1.00,
	"AE":  0.10, "AR": 0.09, "AU": 0.05, "AZ": 0.30, "BD": 0.30, "BR": 0.06,
	"CA": 0.01, "CN": 0.05, "DE": 0.10, "EG": 0.25, "ES": 0.08, "FR": 0.08,
	"GB": 0.05, "ID": 0.41, "IN": 0.08, "IT": 0.09, "JP": 0.08, "KE": 0.15,
	"KZ": 0.35, "LK": 0.30, "MA": 0.25, "MM": 0.30, "MX": 0.04, "MY": 0.07,
	"NG": 0.30, "NL": 0.10, "PH": 0.20, "PK": 0.30, "PL": 0.04, "RU": 0.60,
	"SA": 0.10, "TH": 0.06, "TJ": 0.45, "TR": 0.06, "UA": 0.20, "US": 0.01,
	"UZ": 0.45, "VN": 0.10, "ZA": 0.03,
}

// fallbackPrice is the price of a country neither table lists.
const fallbackPrice = 0.10

// price is what one SMS to country costs under s.
func (s *Scenario) price(country string) float64 {
	if p, ok := s.Prices[country]; ok {
		return p
	}
	if p, ok := DefaultPrices[country]; ok {
		return p
	}
	return fallbackPrice
}
