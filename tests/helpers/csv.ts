/** CSV for the export tests. */

/**
 * RFC 4180 reader: quoted fields may hold commas, doubled quotes and line breaks. `separators` other than
 * the comma read it as a spreadsheet set to split on them too would (LibreOffice offers `;` and tab).
 */
export function parseCsv(text: string, separators = ','): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let f = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { f += '"'; i++; } else if (c === '"') quoted = false; else f += c;
    } else if (c === '"') quoted = true;
    else if (separators.includes(c)) { row.push(f); f = ''; }
    else if (c === '\r' && text[i + 1] === '\n') { row.push(f); rows.push(row); row = []; f = ''; i++; }
    else f += c;
  }
  if (f !== '' || row.length) { row.push(f); rows.push(row); }
  return rows;
}
