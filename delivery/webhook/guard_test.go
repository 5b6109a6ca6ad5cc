package webhook_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/heraldgo/herald/delivery/webhook"
)

// TestGuardEmbeddedIPv4: an IPv6 address that carries an IPv4 address is
// judged by that address — NAT64 (well-known and local-use), 6to4,
// Teredo, IPv4-compatible, IPv4-mapped and IPv4-translated forms of a
// private, loopback or metadata address are refused; the same forms of a
// public address pass (the local-use NAT64 prefix excepted: refused
// whatever it carries); AllowNetworks naming the IPv4 network lets them
// through.
func TestGuardEmbeddedIPv4(t *testing.T) {
	t.Parallel()
	// Each form, filled with an IPv4 address.
	forms := map[string]func(v4 [4]byte) netip.Addr{
		"NAT64 64:ff9b::/96": func(v [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b, 12: v[0], 13: v[1], 14: v[2], 15: v[3]})
		},
		"6to4 2002::/16": func(v [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: v[0], 3: v[1], 4: v[2], 5: v[3], 15: 1})
		},
		"Teredo 2001::/32": func(v [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{0: 0x20, 1: 0x01, 4: 0x41, 5: 0x36, 6: 0xe1, 7: 0xd3, // server 65.54.227.211
				12: ^v[0], 13: ^v[1], 14: ^v[2], 15: ^v[3]})
		},
		"IPv4-compatible ::a.b.c.d": func(v [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{12: v[0], 13: v[1], 14: v[2], 15: v[3]})
		},
		"IPv4-mapped ::ffff:a.b.c.d": func(v [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: v[0], 13: v[1], 14: v[2], 15: v[3]})
		},
		"IPv4-translated ::ffff:0:a.b.c.d": func(v [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{8: 0xff, 9: 0xff, 12: v[0], 13: v[1], 14: v[2], 15: v[3]})
		},
		"local-use NAT64 64:ff9b:1::/48 (/96 layout)": func(v [4]byte) netip.Addr {
			return netip.AddrFrom16([16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b, 5: 0x01, 12: v[0], 13: v[1], 14: v[2], 15: v[3]})
		},
	}
	internal := map[string][4]byte{
		"private 10.1.2.3":         {10, 1, 2, 3},
		"private 192.168.0.1":      {192, 168, 0, 1},
		"loopback 127.0.0.1":       {127, 0, 0, 1},
		"metadata 169.254.169.254": {169, 254, 169, 254},
		"shared 100.64.0.1":        {100, 64, 0, 1},
	}
	public := [4]byte{93, 184, 215, 14}
	dial := func(allow []netip.Prefix, ip netip.Addr) error {
		return webhook.GuardControl(allow)("tcp6", netip.AddrPortFrom(ip, 443).String(), nil)
	}
	for form, fill := range forms {
		for what, v4 := range internal {
			ip := fill(v4)
			err := dial(nil, ip)
			if err == nil {
				t.Errorf("%s of %s: %s passed the guard", form, what, ip)
				continue
			}
			if !strings.Contains(err.Error(), "AllowNetworks") {
				t.Errorf("%s of %s: %v does not name AllowNetworks", form, what, err)
			}
			allow := []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4(v4), 32)}
			if strings.HasPrefix(form, "local-use") { // allowed by its own prefix only
				allow = []netip.Prefix{netip.MustParsePrefix("64:ff9b:1::/48")}
			}
			if err := dial(allow, ip); err != nil {
				t.Errorf("%s of %s with %s allowed: %v", form, what, allow[0], err)
			}
		}
		ip := fill(public)
		err := dial(nil, ip)
		if strings.HasPrefix(form, "local-use") {
			if err == nil {
				t.Errorf("%s: %s passed the guard (the local-use prefix routes only inside its operator's network)", form, ip)
			}
		} else if err != nil {
			t.Errorf("%s of public 93.184.215.14: %s refused: %v", form, ip, err)
		}
	}
	// The IPv6 loopback and unspecified addresses, which lie in ::/96,
	// are still refused as themselves; a plain public IPv6 address passes.
	for _, s := range []string{"::1", "::", "::2"} {
		if err := dial(nil, netip.MustParseAddr(s)); err == nil {
			t.Errorf("%s passed the guard", s)
		}
	}
	if err := dial(nil, netip.MustParseAddr("2606:2800:21f:cb07:6820:80da:af6b:8b2c")); err != nil {
		t.Errorf("a public IPv6 address was refused: %v", err)
	}
	if err := dial(nil, netip.MustParseAddr("64:ff9b::a9fe:a9fe")); err == nil || !strings.Contains(err.Error(), "169.254.169.254") {
		t.Errorf("the refusal of 64:ff9b::a9fe:a9fe does not name the address it carries: %v", err)
	}
}
