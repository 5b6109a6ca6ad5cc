// Command apisurface counts the exported names of every public package of
// this repository (every module of go.work): top-level names (types,
// functions, variables, constants) and exported methods on exported types,
// read from non-test files with go/parser. Packages under internal/,
// integration/, examples/, testdata and main packages are not public and
// are skipped.
//
//	go run ./internal/apisurface          # a Markdown table
//	go run ./internal/apisurface -names   # every name, per package
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type pkg struct {
	dir     string
	top     []string
	methods []string
}

func main() {
	names := flag.Bool("names", false, "list every exported name")
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	var pkgs []*pkg
	err := filepath.WalkDir(*root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(*root, path)
		base := d.Name()
		if rel != "." && (strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") ||
			base == "internal" || base == "integration" || base == "examples" || base == "testdata" || base == "cmd") {
			return filepath.SkipDir
		}
		p, err := read(path, rel)
		if err != nil {
			return err
		}
		if p != nil {
			pkgs = append(pkgs, p)
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].dir < pkgs[j].dir })
	if *names {
		for _, p := range pkgs {
			fmt.Printf("%s (%d top-level, %d methods)\n", p.dir, len(p.top), len(p.methods))
			for _, n := range p.top {
				fmt.Printf("\t%s\n", n)
			}
			for _, n := range p.methods {
				fmt.Printf("\t%s\n", n)
			}
		}
		return
	}
	fmt.Println("| package | top-level names | methods |")
	fmt.Println("|---|---:|---:|")
	var top, meth int
	for _, p := range pkgs {
		fmt.Printf("| `%s` | %d | %d |\n", p.dir, len(p.top), len(p.methods))
		top += len(p.top)
		meth += len(p.methods)
	}
	fmt.Printf("| total | %d | %d |\n", top, meth)
}

// read parses the non-test Go files of dir; nil when it holds no
// non-main package.
func read(dir, rel string) (*pkg, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	p := &pkg{dir: filepath.ToSlash(rel)}
	found := false
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if f.Name.Name == "main" {
			return nil, nil
		}
		found = true
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					p.top = append(p.top, "func "+d.Name.Name)
					continue
				}
				if recv := recvName(d.Recv.List[0].Type); ast.IsExported(recv) {
					p.methods = append(p.methods, "method "+recv+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							p.top = append(p.top, "type "+s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.IsExported() {
								p.top = append(p.top, d.Tok.String()+" "+id.Name)
							}
						}
					}
				}
			}
		}
	}
	if !found {
		return nil, nil
	}
	sort.Strings(p.top)
	sort.Strings(p.methods)
	return p, nil
}

func recvName(t ast.Expr) string {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
