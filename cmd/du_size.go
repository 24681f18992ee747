package cmd

// How esfs du writes a size: GNU's human_readable (gnulib lib/human.c) as
// du calls it, byte for byte, so that the output equals GNU du's.

import "strconv"

// duUnits is how du prints sizes: in blocks of blockSize bytes, rounded
// up (-k, -m, -b, the default 1024), or scaled with a suffix (autoscale:
// -h in powers of 1024, --si in powers of 1000; blockSize 1).
type duUnits struct {
	blockSize uint64
	autoscale bool
	base1000  bool // --si: powers of 1000, and "k" for kilo
}

// powerLetters are the suffixes of the powers, K for 1024 or 1000 (which
// --si writes k), as coreutils 9.1 has them (R and Q came later; a uint64
// never reaches them).
const powerLetters = "\x00KMGTPEZY"

// format is n bytes in u's units, as GNU du prints it: always rounded up
// (du's human_ceiling), one decimal under 10 when scaled (1.5K, 10K, 2.0M).
func (u duUnits) format(n uint64) string {
	base := uint64(1024)
	if u.base1000 {
		base = 1000
	}
	// amt.tenths, with rounding saying how the rest compares with a half
	// tenth: 0 none, 1 less, 2 exactly, 3 more.
	var amt uint64
	var tenths, rounding uint64
	if u.blockSize <= 1 {
		amt = n
	} else {
		d := u.blockSize
		r10 := (n % d) * 10
		r2 := (r10 % d) * 2
		amt, tenths = n/d, r10/d
		switch {
		case r2 == 0:
			rounding = 0
		case r2 < d:
			rounding = 1
		case r2 == d:
			rounding = 2
		default:
			rounding = 3
		}
	}
	exponent := 0
	point := "" // ".N" written before the suffix
	if u.autoscale && base <= amt {
		for {
			r10 := (amt%base)*10 + tenths
			r2 := (r10%base)*2 + rounding>>1
			amt /= base
			tenths = r10 / base
			if r2 < base {
				if r2+rounding != 0 {
					rounding = 1
				} else {
					rounding = 0
				}
			} else if base < r2+rounding {
				rounding = 3
			} else {
				rounding = 2
			}
			exponent++
			if !(base <= amt && exponent < len(powerLetters)-1) {
				break
			}
		}
		if amt < 10 {
			if rounding > 0 {
				tenths++
				rounding = 0
				if tenths == 10 {
					amt++
					tenths = 0
				}
			}
			if amt < 10 {
				point = "." + strconv.FormatUint(tenths, 10)
				tenths, rounding = 0, 0
			}
		}
	}
	if tenths+rounding > 0 {
		amt++
		if u.autoscale && amt == base && exponent < len(powerLetters)-1 {
			exponent++
			point = ".0"
			amt = 1
		}
	}
	s := strconv.FormatUint(amt, 10) + point
	if u.autoscale && exponent > 0 {
		if u.base1000 && exponent == 1 {
			s += "k"
		} else {
			s += string(powerLetters[exponent])
		}
	}
	return s
}
