package config

import "testing"

func TestScanKeyLines(t *testing.T) {
	src := `# comment with [brackets] and key = "value"
top = 1
[node]
id = "n # not a comment"
"quoted key" = 'lit'
dotted.sub = 2

[[source]]
name = "a"
multi = """
line [x]
name = "inside string"
"""
arr = [
  "x", # comment
  [1, 2],
  { k = "v" },
]
[source.hmac]
header = "X"

[[source]]
name = "b"
inl = { a = 1, b = { c = [1, 2] } }
lit = '''
'''
after = true

[admin]
tokens = [{ name = "ops" }, { name = "ci", token = "t" }]

[[admin.more]]
x = 1
[[admin.more]]
x = 2
`
	kl := scanKeyLines(src)
	for path, line := range map[string]int{
		"top":                   2,
		"node":                  3,
		"node.id":               4,
		`node."quoted key"`:     5,
		"node.dotted":           6,
		"node.dotted.sub":       6,
		"source[0]":             8,
		"source[0].name":        9,
		"source[0].multi":       10,
		"source[0].arr":         14,
		"source[0].arr[0]":      15,
		"source[0].arr[1]":      16,
		"source[0].arr[1][1]":   16,
		"source[0].arr[2].k":    17,
		"source[0].hmac":        19,
		"source[0].hmac.header": 20,
		"source[1]":             22,
		"source[1].name":        23,
		"source[1].inl.a":       24,
		"source[1].inl.b.c[1]":  24,
		"source[1].lit":         25,
		"source[1].after":       27,
		"admin":                 29,
		"admin.tokens[1].token": 30,
		"admin.more[0].x":       33,
		"admin.more[1].x":       35,
	} {
		if got := kl.lines[path]; got != line {
			t.Errorf("%s at line %d, want %d", path, got, line)
		}
	}
	for _, p := range []string{"source[0].multi.name", "name", "source[0].name[0]"} {
		if _, ok := kl.lines[p]; ok {
			t.Errorf("spurious key %s", p)
		}
	}
	if got := kl.tableAt(21); got != "source[0].hmac" {
		t.Errorf("tableAt(21) = %q", got)
	}
	if got := kl.tableAt(1); got != "" {
		t.Errorf("tableAt(1) = %q", got)
	}
	// find falls back to the nearest enclosing table.
	if got := kl.find("source[1].forward"); got != 22 {
		t.Errorf("find(source[1].forward) = %d, want 22", got)
	}
	if got := kl.find("source[1].missing", "source[1].after"); got != 27 {
		t.Errorf("find with an alternative = %d, want 27", got)
	}
}

// TestScanGarbage: the scanner never panics and keeps going after lines it
// cannot read.
func TestScanGarbage(t *testing.T) {
	for _, src := range []string{
		"", "[", "[[", "a", "a =", `a = "`, `a = """`, "a = [", "a = {", "a = { b", `"`, "'", "\\",
		"[[x]\nb = 1", "a = [1,,2]\nb = 2", "= 1\nb = 2", "a = '''\n\nb = 2",
	} {
		scanKeyLines(src)
	}
	kl := scanKeyLines("a = [1,,2]\nb = 2\n= 3\nc = 4")
	if kl.lines["b"] != 2 || kl.lines["c"] != 4 {
		t.Errorf("did not recover: %v", kl.lines)
	}
}

func TestPaths(t *testing.T) {
	for in, want := range map[string]string{"a[1].b": "a[1]", "a[1]": "a", "a": "", "a.b.c": "a.b"} {
		if got := parentPath(in); got != want {
			t.Errorf("parentPath(%q) = %q, want %q", in, got, want)
		}
	}
	if got := stripIndexes("source[12].hmac[3].x"); got != "source.hmac.x" {
		t.Errorf("stripIndexes = %q", got)
	}
}

func FuzzScanKeyLines(f *testing.F) {
	f.Add("[[source]]\nname = \"a\"\nhmac = { header = \"X\" }\n")
	f.Add("a = [\n  1,\n  { b = '''x''' },\n]\n")
	f.Fuzz(func(t *testing.T, src string) {
		kl := scanKeyLines(src)
		for p, l := range kl.lines {
			if l < 1 {
				t.Fatalf("%s at line %d", p, l)
			}
		}
	})
}
