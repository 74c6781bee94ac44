package server

// Most tensor values in JSON requests are short decimals ("0.5", "-12.25")
// and most in replies are small integers or zeros: these fast paths give
// the same results as strconv without its general scan and shortest-digit
// search. Both fall back to strconv for everything else.

// float32pow10 and float64pow10 are the powers of ten that are exact in
// each type.
var (
	float32pow10 = [...]float32{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10}
	float64pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
		1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}
)

// exactDecimal returns a number token without an exponent, m/10^k with
// m's digits all read, as the correctly rounded float of the given size,
// when m and 10^k are both exact in it (then one division rounds once,
// as strconv's own exact path does). ok is false otherwise.
func exactDecimal(raw []byte, bits int) (f float64, ok bool) {
	neg := len(raw) > 0 && raw[0] == '-'
	if neg {
		raw = raw[1:]
	}
	var m uint64
	frac, digits := -1, 0
	for i, c := range raw {
		switch {
		case c >= '0' && c <= '9':
			if digits++; digits > 16 {
				return 0, false
			}
			m = m*10 + uint64(c-'0')
		case c == '.' && frac < 0:
			frac = i + 1
		default:
			return 0, false // an exponent
		}
	}
	k := 0
	if frac >= 0 {
		k = len(raw) - frac
	}
	if bits == 32 {
		if m >= 1<<24 || k >= len(float32pow10) {
			return 0, false
		}
		f = float64(float32(m) / float32pow10[k])
	} else {
		if m >= 1<<53 || k >= len(float64pow10) {
			return 0, false
		}
		f = float64(m) / float64pow10[k]
	}
	if neg {
		f = -f
	}
	return f, true
}

// appendSmallInt appends f as strconv.AppendFloat(dst, f, 'g', -1, bits)
// would when f is an integer of magnitude below 10^6 ('g' writes larger
// ones with an exponent) other than -0. ok is false otherwise.
func appendSmallInt(dst []byte, f float64) ([]byte, bool) {
	if f <= -1e6 || f >= 1e6 || f != float64(int64(f)) || f == 0 && 1/f < 0 {
		return dst, false
	}
	v := int64(f)
	if v < 0 {
		dst = append(dst, '-')
		v = -v
	}
	if v < 10 {
		return append(dst, byte('0'+v)), true
	}
	var buf [7]byte
	i := len(buf)
	for v > 0 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, buf[i:]...), true
}
