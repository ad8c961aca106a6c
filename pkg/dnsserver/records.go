package dnsserver

import (
	"net/netip"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// A returns an A record of name (as the question spelled it) for addr,
// which must be IPv4.
func A(name dnsmessage.Name, ttl uint32, addr netip.Addr) dnsmessage.Resource {
	return dnsmessage.Resource{
		Header: dnsmessage.ResourceHeader{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: ttl},
		Body:   &dnsmessage.AResource{A: addr.As4()},
	}
}

// Hosts is a zone of fixed names, each with one IPv4 address, that holds
// every name: a name it lacks is answered "no such name", never
// forwarded. Names are matched without regard to case, with or without
// their final dot.
func Hosts(ttl uint32, names map[string]netip.Addr) Zone {
	byName := make(map[string]netip.Addr, len(names))
	for n, a := range names {
		byName[Canonical(n)] = a
	}
	return func(q dnsmessage.Question) (Answer, bool) {
		addr, ok := byName[Canonical(q.Name.String())]
		switch {
		case !ok:
			return Answer{RCode: dnsmessage.RCodeNameError}, true
		case q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeALL:
			return Answer{Records: []dnsmessage.Resource{A(q.Name, ttl, addr)}}, true
		default:
			return Answer{}, true
		}
	}
}

// Canonical is name in lower case with its final dot, the form zones
// compare names in.
func Canonical(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}
