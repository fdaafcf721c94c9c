// The .dnn language (spec §2-§6). The C++ parser is generated into the build tree.
grammar Dnn;

program : topDecl* EOF ;
// A lone expression, as the REPL reads it.
replInput : expr EOF ;

topDecl
  : 'import' ID ';'                                          # importDecl
  | 'const' ID '=' expr ';'                                  # constDecl
  | 'dim' ID ('in' lo=expr '..' hi=expr)? ';'                # dimDecl
  // `param frozen w: ...`: a param dnnc train leaves as it is (spec training.md §12)
  // `param w: ... from "encoder.layer.{l}.weight"` (interop.md §15); `from` is a word only
  // here (the parser glue checks the ID), so it stays usable as a name elsewhere
  | 'param' frozen='frozen'? ID ':' type (fromKw=ID STRING)? ('=' expr)? ';'   # paramDecl
  | kw=('fn' | 'model') ID '(' (param (',' param)*)? ')' '->' result block   # funcDecl
  ;

// A result type, or named outputs `(emb: f32[B, D], ...)` (a plain tuple type wins where
// no item has a name: the first alternative)
result
  : type                                                     # plainResult
  | '(' output (',' output)* ')'                             # namedResult
  ;
output : (ID ':')? type ;

param : ID ':' type ('=' expr)? ;

type
  : DTYPE ('[' (dimItem (',' dimItem)*)? ']')?               # tensorType
  | '(' type (',' type)+ ')'                                 # tupleType
  ;
dimItem : '...' | expr ;

block : '{' stmt* '}' ;

stmt
  : 'let' pattern (':' type)? '=' expr ';'                   # letStmt
  | 'var' ID (':' type)? '=' expr ';'                        # varStmt
  | ID '=' expr ';'                                          # assignStmt
  | 'return' expr ';'                                        # returnStmt
  | ifStmt                                                   # ifStatement
  | 'for' ID 'in' lo=expr '..' hi=expr block                 # forStmt
  | 'while' expr block                                       # whileStmt
  | 'assert' expr ';'                                        # assertStmt
  | expr ';'                                                 # exprStmt
  ;
ifStmt : 'if' expr block ('else' (block | ifStmt))? ;
pattern : ID | '(' ID (',' ID)+ ')' ;

expr
  : postfix                                                  # postfixExpr
  | <assoc=right> expr '**' expr                             # powExpr
  | op=('-' | '+') expr                                      # unaryExpr
  | expr op=('*' | '/' | '%' | '@') expr                     # mulExpr
  | expr op=('+' | '-') expr                                 # addExpr
  | expr op=('==' | '!=' | '<' | '<=' | '>' | '>=') expr     # cmpExpr
  | 'not' expr                                               # notExpr
  | expr 'and' expr                                          # andExpr
  | expr 'or' expr                                           # orExpr
  ;

postfix
  : primary                                                  # primaryPostfix
  | postfix '(' (arg (',' arg)*)? ')'                        # callPostfix
  | postfix '[' subscript (',' subscript)* ']'               # indexPostfix
  | postfix '.' ID                                           # memberPostfix
  ;

arg : (ID '=')? expr ;
subscript
  : '...'                                                    # ellipsisSub
  | from=expr? ':' to=expr? (':' by=expr?)?             # sliceSub
  | expr                                                     # pointSub
  ;

primary
  : INT                                                      # intLit
  | FLOAT                                                    # floatLit
  | ('true' | 'false')                                       # boolLit
  | STRING                                                   # stringLit
  | ID                                                       # nameRef
  | DTYPE                                                    # dtypeRef
  | '(' expr ')'                                             # parenExpr
  | '(' expr ',' (expr (',' expr)*)? ')'                     # tupleExpr
  | '[' (expr (',' expr)*)? ']'                              # listExpr
  ;

DTYPE : 'f32' | 'f16' | 'bf16' | 'i32' | 'i64' | 'bool' ;
ID : [A-Za-z_] [A-Za-z0-9_]* ;
FLOAT : [0-9]+ '.' [0-9]+ ([eE] [+-]? [0-9]+)? | [0-9]+ [eE] [+-]? [0-9]+ ;
INT : [0-9]+ ;
STRING : '"' (~["\\\r\n] | '\\' .)* '"' ;
COMMENT : '#' ~[\r\n]* -> skip ;
WS : [ \t\r\n]+ -> skip ;
// Any other character becomes a token the parser rejects with a located diagnostic.
ERROR_CHAR : . ;
