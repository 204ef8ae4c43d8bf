package gwerror

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"switchyard.dev/shared/planlimit"
)

// TestReadmeTableIsTheCatalogue holds the proxy README's error table equal
// to the catalogue: the same codes, each with the same statuses.
func TestReadmeTableIsTheCatalogue(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := readmeTable(t, string(b))
	want := map[string][]int{}
	for _, e := range Catalogue() {
		st := []int{e.Status}
		if e.InStream {
			st = []int{200} // the stream's own status; the event carries e.Status
		}
		want[e.Code] = append(st, e.Also...)
		slices.Sort(want[e.Code])
	}
	for code, st := range want {
		got, ok := readme[code]
		if !ok {
			t.Errorf("%s: in the catalogue, not in the README's table", code)
			continue
		}
		if !slices.Equal(got, st) {
			t.Errorf("%s: README says statuses %v, the catalogue %v", code, got, st)
		}
	}
	for code := range readme {
		if _, ok := want[code]; !ok {
			t.Errorf("%s: in the README's table, not in the catalogue", code)
		}
	}
}

// readmeTable reads the "| status | code | when |" table: each code (the
// backquoted names in its cell, outside parentheses) and its statuses.
func readmeTable(t *testing.T, readme string) map[string][]int {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "| status | code | when |\n|---|---|---|\n")
	if !ok {
		t.Fatal("the README has no error table")
	}
	out := map[string][]int{}
	codeRE := regexp.MustCompile("`([a-z_]+)`")
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			t.Fatalf("a row of fewer than three cells: %q", line)
		}
		statuses := parseStatuses(t, cells[1])
		for _, m := range codeRE.FindAllStringSubmatch(outsideParens(cells[2]), -1) {
			out[m[1]] = append(out[m[1]], statuses...)
			slices.Sort(out[m[1]])
			out[m[1]] = slices.Compact(out[m[1]])
		}
	}
	if len(out) == 0 {
		t.Fatal("no codes in the README's error table")
	}
	return out
}

func parseStatuses(t *testing.T, cell string) []int {
	cell = strings.TrimSpace(outsideParens(cell))
	if cell == "other 4xx" || cell == "4xx" {
		return []int{anyClientError}
	}
	var out []int
	for _, f := range strings.Split(cell, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("status cell %q: %v", cell, err)
		}
		out = append(out, n)
	}
	return out
}

// outsideParens is s without what is inside parentheses (at any depth).
func outsideParens(s string) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestLookupAndStatus(t *testing.T) {
	e, ok := Lookup(ProviderError)
	if !ok || e.Status != 502 || !e.Allows(504) || e.Allows(503) {
		t.Fatalf("provider_error: %+v %v", e, ok)
	}
	if e, _ := Lookup(InvalidRequest); !e.Allows(431) || e.Allows(500) {
		t.Fatalf("invalid_request allows any 4xx, no 5xx: %+v", e)
	}
	if _, ok := Lookup("no_such_code"); ok {
		t.Fatal("Lookup found an unknown code")
	}
}

// TestPlanCodes: every code the plan limiter refuses with is in the
// catalogue, as a 429; a budget's is not for an SDK to retry.
func TestPlanCodes(t *testing.T) {
	for _, c := range []planlimit.Code{planlimit.RateLimited, planlimit.ConcurrencyLimited, planlimit.BudgetExhausted, planlimit.BudgetInsufficient} {
		e, ok := Lookup(string(c))
		if !ok || e.Status != 429 {
			t.Fatalf("%s: %+v %v", c, e, ok)
		}
		if e.Retryable == c.Budget() {
			t.Errorf("%s: retryable %v", c, e.Retryable)
		}
	}
}

func TestCodesUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range Catalogue() {
		if seen[e.Code] {
			t.Errorf("%s twice", e.Code)
		}
		seen[e.Code] = true
	}
}

// TestEveryCodeConstantIsCatalogued: each code constant of the package has
// its entry (a constant added without one would answer 500).
func TestEveryCodeConstantIsCatalogued(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "gwerror.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if n.IsExported() {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	if len(names) != len(Catalogue()) {
		t.Fatalf("%d code constants (%v), %d catalogue entries", len(names), names, len(Catalogue()))
	}
}
