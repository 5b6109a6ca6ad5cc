package jsonform

import (
	"cmp"
	"reflect"
	"slices"
	"strings"
	"unicode"
)

// structField is one field of a struct's JSON object, worked out once per
// type as encoding/json does.
type structField struct {
	name      string
	nameJSON  []byte // `"name":`
	tagged    bool   // the name came from a json tag
	index     []int  // through embedded structs
	omitEmpty bool
	omitZero  bool
	isZero    func(reflect.Value) bool // a custom IsZero, for omitzero; nil: reflect's
	quoted    bool                     // the ",string" option applies
	enc       encoderFunc
}

// structEncoder writes a struct as an object of its fields, in field order.
// The field list and each field's encoder are built once, when the type's
// encoder is.
func structEncoder(t reflect.Type) encoderFunc {
	fields := typeFields(t)
	return func(st state, dst []byte, v reflect.Value) ([]byte, *Error) {
		st, err := st.enter(t)
		if err != nil {
			return dst, err
		}
		dst = append(dst, '{')
		first := true
	fields:
		for i := range fields {
			f := &fields[i]
			fv := v
			for _, j := range f.index {
				if fv.Kind() == reflect.Pointer {
					if fv.IsNil() {
						continue fields // a field of a nil embedded pointer is absent
					}
					fv = fv.Elem()
				}
				fv = fv.Field(j)
			}
			if f.omitEmpty && isEmptyValue(fv) ||
				f.omitZero && (f.isZero == nil && fv.IsZero() || f.isZero != nil && f.isZero(fv)) {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, f.nameJSON...)
			start := len(dst)
			if dst, err = f.enc(st, dst, fv); err != nil {
				return dst, err.atKey(f.name)
			}
			if f.quoted && string(dst[start:]) != "null" {
				dst = appendString(dst[:start], string(dst[start:]))
			}
		}
		return append(dst, '}'), nil
	}
}

// isEmptyValue is encoding/json's omitempty test.
func isEmptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64,
		reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// typeFields returns the fields encoding/json would encode for t: exported
// fields and the exported fields of embedded structs, named by their json
// tags, with Go's rules for hidden embedded fields (a tagged field wins over
// an untagged one at the same depth; two of a kind cancel each other out).
// This follows encoding/json's algorithm step by step, so a struct has the
// same object here as there.
func typeFields(t reflect.Type) []structField {
	type candidate struct {
		structField
		typ reflect.Type // the field's type, one unnamed pointer followed
	}
	current := []candidate{}
	next := []candidate{{typ: t}}
	var count, nextCount map[reflect.Type]int
	visited := map[reflect.Type]bool{}
	var found []candidate

	for len(next) > 0 {
		current, next = next, current[:0]
		count, nextCount = nextCount, map[reflect.Type]int{}

		for _, f := range current {
			if visited[f.typ] {
				continue
			}
			visited[f.typ] = true

			for i := range f.typ.NumField() {
				sf := f.typ.Field(i)
				if sf.Anonymous {
					ft := sf.Type
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue // embedded unexported non-struct types are ignored
					}
					// Embedded unexported struct types may have exported fields.
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if !isValidTag(name) {
					name = ""
				}
				index := make([]int, len(f.index)+1)
				copy(index, f.index)
				index[len(f.index)] = i

				ft := sf.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}

				if name != "" || !sf.Anonymous || ft.Kind() != reflect.Struct {
					tagged := name != ""
					if name == "" {
						name = sf.Name
					}
					c := candidate{typ: ft, structField: structField{
						name:      name,
						tagged:    tagged,
						index:     index,
						omitEmpty: hasOption(opts, "omitempty"),
						omitZero:  hasOption(opts, "omitzero"),
						quoted:    hasOption(opts, "string") && isPlainScalar(ft),
					}}
					if c.omitZero {
						c.isZero = zeroFunc(sf.Type)
					}
					found = append(found, c)
					if count[f.typ] > 1 {
						// Several embeddings of the same type at this depth:
						// a second copy makes the fields cancel out below.
						found = append(found, found[len(found)-1])
					}
					continue
				}
				// An embedded struct to explore at the next depth.
				nextCount[ft]++
				if nextCount[ft] == 1 {
					next = append(next, candidate{typ: ft, structField: structField{name: ft.Name(), index: index}})
				}
			}
		}
	}

	slices.SortFunc(found, func(a, b candidate) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		if c := cmp.Compare(len(a.index), len(b.index)); c != 0 {
			return c
		}
		if a.tagged != b.tagged {
			if a.tagged {
				return -1
			}
			return +1
		}
		return slices.Compare(a.index, b.index)
	})

	// Keep, for each name, the one dominant field: the shallowest, a tagged
	// one before an untagged one; none when two tie.
	var fields []structField
	for i := 0; i < len(found); {
		j := i + 1
		for j < len(found) && found[j].name == found[i].name {
			j++
		}
		if j-i == 1 || len(found[i].index) < len(found[i+1].index) || found[i].tagged != found[i+1].tagged {
			fields = append(fields, found[i].structField)
		}
		i = j
	}
	slices.SortFunc(fields, func(a, b structField) int { return slices.Compare(a.index, b.index) })

	for i := range fields {
		f := &fields[i]
		f.nameJSON = append(appendString(nil, f.name), ':')
		f.enc = typeEncoder(typeByIndex(t, f.index))
	}
	return fields
}

func typeByIndex(t reflect.Type, index []int) reflect.Type {
	for _, i := range index {
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		t = t.Field(i).Type
	}
	return t
}

func hasOption(opts, name string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == name {
			return true
		}
	}
	return false
}

// isPlainScalar reports whether t is a bool, number or string written by
// its kind alone, the only types encoding/json's ",string" option quotes.
func isPlainScalar(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64,
		reflect.String:
	default:
		return false
	}
	if t == durationType || t == numberType {
		return false
	}
	for _, iface := range []reflect.Type{marshalerType, valuerType, textMarshalerType} {
		if ok, _ := implements(t, iface); ok {
			return false
		}
	}
	return true
}

// zeroFunc returns how omitzero tests a field of type t: its IsZero method
// when it has one (as encoding/json), or nil for reflect's zero test.
func zeroFunc(t reflect.Type) func(reflect.Value) bool {
	switch {
	case t.Kind() == reflect.Interface && t.Implements(isZeroerType):
		return func(v reflect.Value) bool {
			return v.IsNil() || (v.Elem().Kind() == reflect.Pointer && v.Elem().IsNil()) ||
				v.Interface().(isZeroer).IsZero()
		}
	case t.Kind() == reflect.Pointer && t.Implements(isZeroerType):
		return func(v reflect.Value) bool { return v.IsNil() || v.Interface().(isZeroer).IsZero() }
	case t.Implements(isZeroerType):
		return func(v reflect.Value) bool { return receiver(v, false).(isZeroer).IsZero() }
	case reflect.PointerTo(t).Implements(isZeroerType):
		return func(v reflect.Value) bool { return receiver(v, true).(isZeroer).IsZero() }
	}
	return nil
}

// isValidTag is encoding/json's test of a tag name.
func isValidTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
			// Backslash and quote are reserved; other punctuation is allowed.
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}
