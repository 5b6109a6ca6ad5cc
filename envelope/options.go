package envelope

import "slices"

// Validate checks the declaration on its own (the capture packages check
// the column names against the model when it is registered). Errors match
// ErrConfiguration and name the option.
func (o Options) Validate() error {
	if o.Operations != nil && len(o.Operations) == 0 {
		return configurationf("Options.Operations", "empty list captures nothing; leave it nil for all operations or drop the declaration")
	}
	seen := map[Operation]bool{}
	for i, op := range o.Operations {
		if !op.valid() {
			return configurationf("Options.Operations["+itoa(int64(i))+"]", "unknown operation %q (want inserted, updated or deleted)", string(op))
		}
		if seen[op] {
			return configurationf("Options.Operations["+itoa(int64(i))+"]", "operation %q listed twice", string(op))
		}
		seen[op] = true
	}
	if o.Payload < After || o.Payload > BeforeAndAfter {
		return configurationf("Options.Payload", "unknown payload mode %d (want After, Keys or BeforeAndAfter)", int(o.Payload))
	}
	if o.Fields != nil && len(o.Exclude) > 0 {
		return configurationf("Options.Fields", "Fields and Exclude are mutually exclusive: list the columns to keep in Fields, or the ones to drop in Exclude")
	}
	if err := noDuplicates("Options.Fields", o.Fields); err != nil {
		return err
	}
	if err := noDuplicates("Options.Exclude", o.Exclude); err != nil {
		return err
	}
	if o.Topic != "" && o.TopicFunc != nil {
		return configurationf("Options.Topic", "Topic and TopicFunc are mutually exclusive")
	}
	if o.OrderingKey != "" && o.OrderingKeyFunc != nil {
		return configurationf("Options.OrderingKey", "OrderingKey and OrderingKeyFunc are mutually exclusive")
	}
	if o.Unordered && (o.OrderingKey != "" || o.OrderingKeyFunc != nil) {
		return configurationf("Options.Unordered", "Unordered contradicts OrderingKey/OrderingKeyFunc")
	}
	if o.Extend != nil && o.ExtendMany != nil {
		return configurationf("Options.Extend", "Extend and ExtendMany are mutually exclusive")
	}
	if o.Tenant != "" {
		if o.Payload == Keys {
			return configurationf("Options.Tenant", "a tenant column is read from the row, and Payload Keys reads none: use After or BeforeAndAfter")
		}
		if slices.Contains(o.Exclude, o.Tenant) {
			return configurationf("Options.Tenant", "column %q is also in Exclude: the tenant column is always read", o.Tenant)
		}
	}
	if err := checkTemplate("Options.Topic", orDefault(o.Topic, DefaultTopic)); err != nil {
		return err
	}
	if err := checkTemplate("Options.OrderingKey", orDefault(o.OrderingKey, DefaultOrderingKey)); err != nil {
		return err
	}
	return nil
}

func noDuplicates(option string, names []string) error {
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if n == "" {
			return configurationf(option, "empty column name")
		}
		if seen[n] {
			return configurationf(option, "column %q listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
