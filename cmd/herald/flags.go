package main

import "strings"

// listFlag is a comma-separated list; given again, it adds to the list
// (--route a=x --route b=y, or HERALD_ROUTE=a=x,b=y).
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
