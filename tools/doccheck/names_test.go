package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const repoRoot = "../.."

// walkSections are the README's sections that follow a hold and a request
// by function name.
var walkSections = []string{"### One hold, from proxy A to proxy B", "### One request, through the proxy"}

// decls is what the repository's Go code declares: functions, methods
// and struct fields (by type), types, constants and variables, each by
// package name too, and the packages' names.
type decls struct {
	names   map[string]bool // a function, method or type of that name, in any package
	inPkg   map[string]bool // pkg.Name
	methods map[string]bool // Type.method and pkg.Type.method
}

func declared(t *testing.T) decls {
	t.Helper()
	d := decls{names: map[string]bool{}, inPkg: map[string]bool{}, methods: map[string]bool{}}
	fset := token.NewFileSet()
	repoFiles(t, ".go", func(path string) error {
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := f.Name.Name
		d.names[pkg] = true // a package is named by its name too (`translate`)
		add := func(name string) {
			d.names[name] = true
			d.inPkg[pkg+"."+name] = true
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				add(decl.Name.Name)
				if decl.Recv != nil && len(decl.Recv.List) == 1 {
					recv := receiverType(decl.Recv.List[0].Type)
					d.methods[recv+"."+decl.Name.Name] = true
					d.methods[pkg+"."+recv+"."+decl.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range decl.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						add(s.Name.Name)
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									d.methods[s.Name.Name+"."+n.Name] = true // a field: Outcome.Unsent
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							add(n.Name) // a constant or a variable: hold.Deny
						}
					}
				}
			}
		}
		return nil
	})
	return d
}

// repoFiles calls fn with the path of each of the repository's files whose
// name ends in ext, dot-folders and node_modules aside.
func repoFiles(t *testing.T, ext string, fn func(path string) error) {
	t.Helper()
	err := filepath.WalkDir(repoRoot, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (strings.HasPrefix(e.Name(), ".") || e.Name() == "node_modules") && path != repoRoot {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(path, ext) {
			return nil
		}
		return fn(path)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// receiverType is a method's receiver type name: T of T, *T, T[K] or *T[K].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	// pkg.(*T).m, (*T).m, pkg.(T).m
	methodForm = regexp.MustCompile(`^(?:([a-z][a-z0-9]*)\.)?\(\*?([A-Za-z][A-Za-z0-9]*)\)\.([A-Za-z][A-Za-z0-9]*)$`)
	// a.b: a package's name or a type's, then a name
	dotted = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9]*)\.([A-Za-z][A-Za-z0-9]*)$`)
	// a bare Go name of a function, method or type (no underscores: the
	// README's error codes and classes have them)
	bare = regexp.MustCompile(`^[A-Za-z][a-z0-9]*(?:[A-Z][A-Za-z0-9]*)*$`)
)

// named returns the code spans of the README's walk-through sections.
func named(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	var out []string
	for _, h := range walkSections {
		i := strings.Index(text, h)
		if i < 0 {
			t.Fatalf("README has no section %q", h)
		}
		sec := text[i+len(h):]
		if j := strings.Index(sec, "\n#"); j >= 0 {
			sec = sec[:j]
		}
		for _, m := range codeSpan.FindAllStringSubmatch(sec, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// notGo are the walk-throughs' code spans that look like Go names and are
// not: words of the hold records they show.
var notGo = map[string]bool{"until": true, "probing": true}

// TestWalkThroughNamesExist: every Go name the walk-throughs give is
// declared (a method on the type named, in the package named).
func TestWalkThroughNamesExist(t *testing.T) {
	d := declared(t)
	checked := 0
	for _, s := range named(t) {
		if notGo[s] {
			continue
		}
		ok, isName := true, true
		switch {
		case methodForm.MatchString(s):
			m := methodForm.FindStringSubmatch(s)
			if m[1] != "" {
				ok = d.methods[m[1]+"."+m[2]+"."+m[3]]
			} else {
				ok = d.methods[m[2]+"."+m[3]]
			}
		case dotted.MatchString(s):
			m := dotted.FindStringSubmatch(s)
			switch {
			case d.inPkg[m[1]+"."+m[2]] || d.methods[m[1]+"."+m[2]]:
			case !d.names[m[1]]: // neither a package's name nor a type's
				isName = false // a hold id, a file name, a subject's part
			default:
				ok = false
			}
		case bare.MatchString(s) && !strings.Contains(s, "."):
			ok = d.names[s]
		default:
			isName = false
		}
		if !isName {
			continue
		}
		checked++
		if !ok {
			t.Errorf("README names `%s`, which the code does not declare", s)
		}
	}
	t.Logf("%d names checked", checked)
	if checked < 40 {
		t.Fatalf("only %d names checked: the sections moved or the patterns are wrong", checked)
	}
}

// TestFencesClosed: every code fence of the repository's Markdown files is
// closed (one left open turns the rest of the file into code).
func TestFencesClosed(t *testing.T) {
	n := 0
	repoFiles(t, ".md", func(path string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		open, at := "", 0
		for i, line := range strings.Split(string(b), "\n") {
			l := strings.TrimLeft(line, " ")
			if !strings.HasPrefix(l, "```") && !strings.HasPrefix(l, "~~~") {
				continue
			}
			switch mark := l[:3]; {
			case open == "":
				open, at = mark, i+1
			case mark == open && strings.TrimSpace(l[3:]) == "":
				open = ""
			}
		}
		if open != "" {
			t.Errorf("%s: the fence opened on line %d is never closed", path, at)
		}
		return nil
	})
	if n < 5 {
		t.Fatalf("only %d Markdown files found", n)
	}
}
