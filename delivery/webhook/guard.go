package webhook

import (
	"encoding/binary"
	"net/netip"
)

// IPv6 ranges whose addresses carry an IPv4 address: a host that reaches
// one of them reaches (through a NAT64 gateway, a 6to4 relay, a Teredo
// server or the host's own stack) the IPv4 address inside, so the guard
// judges that address. In IPv6-only clouds with DNS64 a NAT64 address is
// how a name reaches an IPv4 host, private ones and the metadata service
// included.
var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052: the IPv4 address in the last 32 bits
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48")  // RFC 8215: local-use, prefix length (and so the IPv4 address's place) chosen by the operator
	sixToFour      = netip.MustParsePrefix("2002::/16")       // RFC 3056: the IPv4 address in bits 16 to 47
	teredo         = netip.MustParsePrefix("2001::/32")       // RFC 4380: the client's IPv4 address, inverted, in the last 32 bits
	ipv4Compatible = netip.MustParsePrefix("::/96")           // RFC 4291 (deprecated): the IPv4 address in the last 32 bits
	ipv4Translated = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765 (SIIT): the IPv4 address in the last 32 bits
	thisNetwork    = netip.MustParsePrefix("0.0.0.0/8")       // RFC 1122: "this host on this network"; Linux connects 0.0.0.0 to itself
)

// embeddedIPv4 returns the IPv4 address an IPv6 address of the ranges
// above carries. ok is false for other addresses; local says the address
// lies in the local-use NAT64 prefix, which is internal whatever it
// carries: where the IPv4 address sits depends on the operator's prefix
// length, and the prefix routes only inside the operator's network.
func embeddedIPv4(ip netip.Addr) (v4 netip.Addr, ok, local bool) {
	if !ip.Is6() || ip.Is4In6() {
		return netip.Addr{}, false, false
	}
	b := ip.As16()
	last := func() netip.Addr { return netip.AddrFrom4([4]byte(b[12:16])) }
	switch {
	case nat64Local.Contains(ip):
		return netip.Addr{}, false, true
	case nat64WellKnown.Contains(ip), ipv4Translated.Contains(ip):
		return last(), true, false
	case ipv4Compatible.Contains(ip):
		if ip == netip.IPv6Unspecified() || ip == netip.IPv6Loopback() {
			return netip.Addr{}, false, false // judged as themselves
		}
		return last(), true, false
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true, false
	case teredo.Contains(ip):
		var c [4]byte
		binary.BigEndian.PutUint32(c[:], ^binary.BigEndian.Uint32(b[12:16]))
		return netip.AddrFrom4(c), true, false
	}
	return netip.Addr{}, false, false
}

// allowed reports whether ip, or the IPv4 address it carries, lies in one
// of allow.
func allowed(ip netip.Addr, allow []netip.Prefix) bool {
	v4, ok, _ := embeddedIPv4(ip)
	for _, p := range allow {
		if p.Contains(ip) || (ok && p.Contains(v4)) {
			return true
		}
	}
	return false
}

// internal reports whether ip is an address the guard refuses by default:
// loopback, link-local, private, shared, unspecified or "this network",
// multicast — or an IPv6 address that carries such an IPv4 address, or
// one of the local-use NAT64 prefix.
func internal(ip netip.Addr) bool {
	if v4, ok, local := embeddedIPv4(ip); local || (ok && internal(v4)) {
		return true
	}
	return ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() ||
		ip.IsPrivate() || ip.IsUnspecified() || ip.IsMulticast() || sharedSpace.Contains(ip) || thisNetwork.Contains(ip)
}

// describe names ip for the guard's error, with the IPv4 address it
// carries.
func describe(ip netip.Addr) string {
	if v4, ok, local := embeddedIPv4(ip); ok {
		return ip.String() + " (carrying " + v4.String() + ")"
	} else if local {
		return ip.String() + " (local-use NAT64 prefix 64:ff9b:1::/48)"
	}
	return ip.String()
}
