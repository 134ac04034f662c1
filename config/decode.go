package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// EnvPrefix starts the name of every environment variable that overrides
// a key; see EnvName.
const EnvPrefix = "JOBSTAGE_"

// EnvName returns the environment variable that overrides the key at path
// (its segments: keys, map keys such as type names, list indexes):
// EnvPrefix, then the segments joined by "__", each upper-cased with every
// character other than a letter or digit made "_". For example
// EnvName("types", "send-email", "activity_timeout") is
// JOBSTAGE_TYPES__SEND_EMAIL__ACTIVITY_TIMEOUT.
func EnvName(path ...string) string {
	var b strings.Builder
	b.WriteString(EnvPrefix)
	for i, s := range path {
		if i > 0 {
			b.WriteString("__")
		}
		for _, r := range s {
			switch {
			case r >= 'a' && r <= 'z':
				b.WriteRune(r - 'a' + 'A')
			case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
				b.WriteRune(r)
			default:
				b.WriteByte('_')
			}
		}
	}
	return b.String()
}

// nodeBudget bounds the nodes one parse visits, so that a small document
// of nested aliases cannot make it walk an exponential tree.
const nodeBudget = 100_000

// decoder turns a YAML node tree into a Config along the schema and
// collects problems, remembering where each key's value came from.
type decoder struct {
	file string
	env  func(string) (string, bool)

	probs []Problem
	// pos is the node of each key path: the value for a scalar, the key
	// for a mapping or list (so problems point at the key's name).
	pos map[string]*yaml.Node
	// set holds the paths given in the file or the environment, as
	// opposed to defaulted.
	set map[string]bool
	// fromEnv is the variable that gave a path its value.
	fromEnv map[string]string
	// envPath is the path each consulted override variable belongs to.
	envPath map[string]string
	// bad holds the paths whose values decoding reported (a list, when
	// one of its items was); validate does not report them again.
	bad map[string]bool
	// validating: problems from here on are validate's, which do not mark
	// paths bad.
	validating bool
	budget     int
}

func parse(name string, data []byte, env func(string) (string, bool), environ []string) (*Config, []Problem) {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	d := &decoder{
		file: name, env: env, budget: nodeBudget,
		pos: map[string]*yaml.Node{}, set: map[string]bool{},
		fromEnv: map[string]string{}, envPath: map[string]string{}, bad: map[string]bool{},
	}
	root := d.document(data)
	c := new(Config)
	if len(d.probs) == 0 {
		d.object(schema, nil, root, reflect.ValueOf(c).Elem())
		d.validate(c)
	}
	if environ != nil {
		d.unusedEnv(environ)
	}
	if len(d.probs) > 0 {
		slices.SortStableFunc(d.probs, func(a, b Problem) int {
			if (a.Line == 0) != (b.Line == 0) {
				if a.Line == 0 {
					return 1
				}
				return -1
			}
			if a.Line != b.Line {
				return a.Line - b.Line
			}
			return a.Column - b.Column
		})
		return nil, d.probs
	}
	return c, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// document parses data as one YAML document and returns its top node (nil
// for an empty document).
func (d *decoder) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		p := Problem{File: d.file, Message: strings.TrimPrefix(err.Error(), "yaml: ")}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			p.Line, _ = strconv.Atoi(m[1])
			p.Message = m[2]
		}
		d.probs = append(d.probs, p)
		return nil
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		p := Problem{File: d.file, Message: "only one YAML document is allowed"}
		if err == nil {
			p.Line, p.Column = next.Line, next.Column
		}
		d.probs = append(d.probs, p)
		return nil
	}
	if len(doc.Content) == 0 {
		return nil
	}
	return doc.Content[0]
}

func join(path []string, seg string) []string {
	return append(slices.Clip(path), seg)
}

func key(path []string) string { return strings.Join(path, ".") }

// problem records msg about the key at path, positioned at n (or, when n
// is nil, at the nearest enclosing key that has a position).
func (d *decoder) problem(path []string, n *yaml.Node, msg string) {
	if v, ok := d.fromEnv[key(path)]; ok {
		msg += " (set by " + v + ")"
	}
	for i := len(path); n == nil && i > 0; i-- {
		n = d.pos[key(path[:i])]
	}
	if !d.validating {
		d.bad[key(path)] = true
	}
	p := Problem{File: d.file, Key: key(path), Message: msg}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.probs = append(d.probs, p)
}

// visit resolves aliases and charges the node budget; it returns nil when
// the budget is spent.
func (d *decoder) visit(path []string, n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 100 {
			d.problem(path, nil, "alias refers to itself")
			return nil
		}
		n = n.Alias
	}
	if d.budget--; d.budget == 0 {
		d.problem(path, n, fmt.Sprintf("more than %d nodes (aliases expanding too far?)", nodeBudget))
	}
	if d.budget <= 0 {
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

// entry is one key: value of a mapping.
type entry struct{ k, v *yaml.Node }

// entries returns the entries of mapping n, reporting non-scalar and
// duplicate keys and merge keys.
func (d *decoder) entries(path []string, n *yaml.Node) []entry {
	var es []entry
	first := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := d.visit(path, n.Content[i])
		if k == nil {
			return es
		}
		switch {
		case k.Kind != yaml.ScalarNode:
			d.problem(path, k, "a key must be a plain name, not "+describe(k))
		case k.Value == "<<" && k.ShortTag() == "!!merge":
			d.problem(join(path, k.Value), k, "merge keys (<<) are not supported; write the keys out")
		case first[k.Value] != nil:
			d.problem(join(path, k.Value), k, fmt.Sprintf("duplicate key (first at line %d)", first[k.Value].Line))
		default:
			first[k.Value] = k
			es = append(es, entry{k, n.Content[i+1]})
		}
	}
	return es
}

// object decodes mapping n (nil when absent) into struct v along f.
func (d *decoder) object(f *field, path []string, n *yaml.Node, v reflect.Value) {
	given := map[string]entry{}
	if n != nil {
		if n.Kind != yaml.MappingNode {
			d.problem(path, n, "expected a mapping of keys, got "+describe(n))
		} else {
			for _, e := range d.entries(path, n) {
				if f.child(e.k.Value) != nil {
					given[e.k.Value] = e
					continue
				}
				msg, ok := f.reject[e.k.Value]
				if !ok {
					msg = "unknown key" + suggest(e.k.Value, f.keys())
				}
				d.problem(join(path, e.k.Value), e.k, msg)
			}
		}
	}
	for _, c := range f.fields {
		e := given[c.key]
		d.field(c, join(path, c.key), e.k, e.v, v.FieldByIndex(c.index))
	}
}

func (f *field) keys() []string {
	ks := make([]string, len(f.fields))
	for i, c := range f.fields {
		ks[i] = c.key
	}
	return ks
}

// field decodes the value n of key k (both nil when absent) into v.
func (d *decoder) field(f *field, path []string, k, n *yaml.Node, v reflect.Value) {
	n = d.visit(path, n)
	if d.budget <= 0 {
		return
	}
	if isNull(n) {
		n = nil
	}
	p := key(path)
	switch {
	case n != nil && n.Kind == yaml.ScalarNode:
		d.pos[p] = n
		d.set[p] = true
	case k != nil:
		d.pos[p] = k
		d.set[p] = n != nil
	case n != nil:
		d.pos[p] = n
		d.set[p] = true
	}
	switch f.kind {
	case kindObject:
		d.object(f, path, n, v)
	case kindOptional:
		if n != nil {
			pv := reflect.New(f.typ.Elem())
			d.object(f, path, n, pv.Elem())
			v.Set(pv)
		}
	case kindMap:
		d.mapOf(f, path, n, v)
	case kindList:
		d.list(f, path, n, v)
	case kindStrings:
		d.strings(f, path, n, v)
	case kindStringMap:
		d.stringMap(f, path, n, v)
	default:
		d.scalar(f, path, n, v)
	}
}

func (d *decoder) mapOf(f *field, path []string, n *yaml.Node, v reflect.Value) {
	if n == nil {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.problem(path, n, "expected a mapping of names, got "+describe(n))
		return
	}
	m := reflect.MakeMap(f.typ)
	for _, e := range d.entries(path, n) {
		name := e.k.Value
		ep := join(path, name)
		d.pos[key(ep)] = e.k
		ev := d.visit(ep, e.v)
		if isNull(ev) {
			ev = nil
		}
		elem := reflect.New(f.typ.Elem()).Elem()
		d.object(f, ep, ev, elem)
		m.SetMapIndex(reflect.ValueOf(name), elem)
	}
	v.Set(m)
}

func (d *decoder) list(f *field, path []string, n *yaml.Node, v reflect.Value) {
	if n == nil {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.problem(path, n, "expected a list, got "+describe(n))
		return
	}
	s := reflect.MakeSlice(f.typ, 0, len(n.Content))
	for i, en := range n.Content {
		ep := join(path, strconv.Itoa(i))
		en = d.visit(ep, en)
		if en == nil {
			return
		}
		d.pos[key(ep)] = en
		elem := reflect.New(f.typ.Elem()).Elem()
		if isNull(en) {
			en = nil
		}
		d.object(f, ep, en, elem)
		s = reflect.Append(s, elem)
	}
	v.Set(s)
}

func (d *decoder) strings(f *field, path []string, n *yaml.Node, v reflect.Value) {
	var out []string
	given := false
	if n != nil {
		if n.Kind != yaml.SequenceNode {
			d.problem(path, n, "expected a list of strings, got "+describe(n))
		} else {
			given = true
			for i, en := range n.Content {
				ep := join(path, strconv.Itoa(i))
				en = d.visit(ep, en)
				if en == nil {
					return
				}
				d.pos[key(ep)] = en
				if en.Kind != yaml.ScalarNode || isNull(en) {
					d.problem(ep, en, "expected a string, got "+describe(en))
					d.bad[key(path)] = true
					continue
				}
				s, ok := d.expand(ep, en)
				if !ok {
					d.bad[key(path)] = true
					continue
				}
				out = append(out, s)
			}
		}
	}
	if s, name, ok := d.override(path); ok {
		out = nil
		if err := yaml.Unmarshal([]byte(s), &out); err != nil || out == nil {
			d.problem(path, nil, fmt.Sprintf("%s: expected a YAML list of strings such as [\"cat\", \"-n\"], got %q", name, s))
			return
		}
		given = true
	}
	if given {
		v.Set(reflect.ValueOf(out))
	}
}

func (d *decoder) stringMap(f *field, path []string, n *yaml.Node, v reflect.Value) {
	if n == nil {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.problem(path, n, "expected a mapping of names to strings, got "+describe(n))
		return
	}
	m := map[string]string{}
	for _, e := range d.entries(path, n) {
		ep := join(path, e.k.Value)
		ev := d.visit(ep, e.v)
		if ev == nil {
			return
		}
		d.pos[key(ep)] = e.k
		if ev.Kind != yaml.ScalarNode {
			d.problem(ep, ev, "expected a string, got "+describe(ev))
			continue
		}
		s, ok := d.expand(ep, ev)
		if !ok {
			continue
		}
		if o, _, set := d.override(ep); set {
			s = o
		}
		m[e.k.Value] = s
	}
	v.Set(reflect.ValueOf(m))
}

// scalar decodes a string, integer, boolean or duration: from the file,
// else the default; then the environment's override, if any.
func (d *decoder) scalar(f *field, path []string, n *yaml.Node, v reflect.Value) {
	switch {
	case n != nil && n.Kind != yaml.ScalarNode:
		d.problem(path, n, fmt.Sprintf("expected a %s, got %s", f.kind.what(), describe(n)))
	case n != nil:
		if s, ok := d.expand(path, n); ok {
			d.assign(f, path, n, v, s)
		}
	case f.def != "":
		if x, msg := f.parse(f.def); msg == "" {
			v.Set(x)
		} else {
			panic(fmt.Sprintf("config: default of %s: %s", key(path), msg))
		}
	}
	if s, _, ok := d.override(path); ok {
		d.assign(f, path, nil, v, s)
	}
}

func (d *decoder) assign(f *field, path []string, n *yaml.Node, v reflect.Value, s string) {
	x, msg := f.parse(s)
	if msg != "" {
		d.problem(path, n, msg)
		return
	}
	v.Set(x)
}

// override returns the value of the variable that overrides path, if set.
func (d *decoder) override(path []string) (string, string, bool) {
	name := EnvName(path...)
	p := key(path)
	other, seen := d.envPath[name]
	if !seen {
		d.envPath[name] = p
	}
	s, ok := d.env(name)
	if !ok {
		return "", name, false
	}
	if seen && other != p {
		d.problem(path, nil, fmt.Sprintf("%s names both %s and %s; rename one of them", name, other, p))
		return "", name, false
	}
	d.fromEnv[p] = name
	d.set[p] = true
	return s, name, true
}

// unusedEnv reports override variables (those with "__", which other
// JOBSTAGE_ variables do not use) that match no key.
func (d *decoder) unusedEnv(environ []string) {
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || !strings.Contains(name, "__") {
			continue
		}
		if _, ok := d.envPath[name]; !ok {
			d.probs = append(d.probs, Problem{File: d.file, Message: fmt.Sprintf(
				"environment variable %s overrides no key: no such key in the schema, or the type, pipeline, token or map entry it names is not in the file", name)})
		}
	}
}

// expand replaces ${NAME} and ${NAME:-default} in a value from the file;
// $${ stands for a literal ${.
func (d *decoder) expand(path []string, n *yaml.Node) (string, bool) {
	s := n.Value
	if !strings.Contains(s, "${") {
		return s, true
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), true
		}
		if i > 0 && s[i-1] == '$' {
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			d.problem(path, n, "unterminated ${ in value (write $${ for a literal ${)")
			return "", false
		}
		name, def, hasDef := strings.Cut(s[i+2:i+j], ":-")
		if !validEnvName(name) {
			d.problem(path, n, fmt.Sprintf("bad variable reference %q (use ${NAME} or ${NAME:-default})", s[i:i+j+1]))
			return "", false
		}
		val, ok := d.env(name)
		switch {
		case hasDef && val == "":
			val = def
		case !ok:
			d.problem(path, n, fmt.Sprintf("environment variable %s is not set (write ${%s:-default} to give a default)", name, name))
			return "", false
		}
		b.WriteString(val)
		s = s[i+j+1:]
	}
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		ok := r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9'
		if !ok {
			return false
		}
	}
	return true
}

// parse turns text into a value of f's type, or returns what is wrong.
func (f *field) parse(s string) (reflect.Value, string) {
	var x any
	switch f.kind {
	case kindString:
		if f.enum != nil && !slices.Contains(f.enum, s) {
			return reflect.Value{}, fmt.Sprintf("unknown value %q; one of %s%s", s, strings.Join(f.enum, ", "), suggest(s, f.enum))
		}
		x = s
	case kindInt:
		n, err := strconv.ParseInt(s, 0, 64)
		if err != nil {
			return reflect.Value{}, fmt.Sprintf("expected an integer, got %q", s)
		}
		if f.min != nil && n < *f.min {
			return reflect.Value{}, fmt.Sprintf("must be at least %d, got %d", *f.min, n)
		}
		if f.max != nil && n > *f.max {
			return reflect.Value{}, fmt.Sprintf("must be at most %d, got %d", *f.max, n)
		}
		if f.typ.Kind() == reflect.Int && int64(int(n)) != n {
			return reflect.Value{}, fmt.Sprintf("%d is too large", n)
		}
		x = n
	case kindBool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return reflect.Value{}, fmt.Sprintf("expected true or false, got %q", s)
		}
		x = b
	case kindFloat:
		x2, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(x2, 0) || math.IsNaN(x2) {
			return reflect.Value{}, fmt.Sprintf("expected a number, got %q", s)
		}
		x = x2
	case kindDuration:
		t, err := time.ParseDuration(s)
		if err != nil {
			return reflect.Value{}, fmt.Sprintf("bad duration %q: use a number and a unit, such as 500ms, 30s, 5m or 1h30m", s)
		}
		if t < 0 {
			return reflect.Value{}, fmt.Sprintf("must not be negative, got %s", s)
		}
		x = t
	default:
		panic(fmt.Sprintf("config: parse of a %s", f.kind.what()))
	}
	return reflect.ValueOf(x).Convert(f.typ), ""
}
