package main

import (
	"slices"
	"strings"
)

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

// tenantFlag is listFlag for tenants, where an empty name (--tenant "",
// or an empty item, as in --tenant ,acme) names the events without a
// tenant (admin.Query.Tenants' and relay.Config.Tenants' ""). From the
// environment an empty HERALD_TENANT is as unset (fromEnv).
type tenantFlag []string

func (l *tenantFlag) String() string { return strings.Join(*l, ",") }

func (l *tenantFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); !slices.Contains(*l, s) {
			*l = append(*l, s)
		}
	}
	return nil
}

// tenantUsage is the help of --tenant.
const tenantUsage = "only these tenants (comma-separated; the outbox's tenant column; an empty name, --tenant '' or --tenant ,acme, is the events without a tenant)"
