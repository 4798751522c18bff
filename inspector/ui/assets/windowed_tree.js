// A windowed tree (WAI-ARIA tree pattern): only the rows in view are in the DOM.
// Plain JavaScript, no imports: Panel ships it inline with the page (offline, no CDN).
// Items are nested {id, label, secondary, items, selectable, buttons, heat}; `expanded` and `active`
// are index paths into them, as in pmui.Tree. A collapsed node with children carries one
// placeholder child; the server sends the real children when the node is expanded.
export function render({ model, el }) {
  const ROW = 28
  const BUFFER = 12
  const tree = document.createElement("div")
  tree.className = "wtree"
  tree.setAttribute("role", "tree")
  tree.tabIndex = 0
  const spacer = document.createElement("div")
  spacer.className = "wtree-spacer"
  tree.append(spacer)
  let rows = []
  let focus = 0
  let activeKey = ""

  const key = (path) => path.join(",")

  function flatten() {
    const open = new Set((model.expanded || []).map(key))
    activeKey = (model.active && model.active.length) ? key(model.active[0]) : ""
    rows = []
    const walk = (items, path, level, parent) => {
      items.forEach((item, k) => {
        const p = path.concat([k])
        if (item.selectable === false && !(item.items && item.items.length)) return
        const hasKids = !!(item.items && item.items.length)
        const isOpen = hasKids && open.has(key(p))
        const i = rows.length
        rows.push({ item, path: p, level, hasKids, isOpen, parent })
        if (isOpen) walk(item.items, p, level + 1, i)
      })
    }
    walk(model.items || [], [], 1, -1)
    if (focus >= rows.length) focus = Math.max(0, rows.length - 1)
  }

  function rowElement(i) {
    const r = rows[i]
    const div = document.createElement("div")
    div.className = "wtree-row" + (i === focus ? " focused" : "") +
      (key(r.path) === activeKey ? " selected" : "")
    div.id = `wtree-${i}`
    div.style.top = `${i * ROW}px`
    div.style.paddingLeft = `${(r.level - 1) * model.level_indent + 4}px`
    div.setAttribute("role", "treeitem")
    div.setAttribute("aria-level", r.level)
    div.setAttribute("aria-setsize", 1)
    div.setAttribute("aria-selected", key(r.path) === activeKey ? "true" : "false")
    div.setAttribute("data-path", "path" in r.item ? r.item.path : r.item.id)
    div.setAttribute("aria-label", r.item.label.replace(/\u2003/g, " "))
    if (r.hasKids) div.setAttribute("aria-expanded", r.isOpen ? "true" : "false")
    const toggle = document.createElement("span")
    toggle.className = "wtree-toggle"
    toggle.setAttribute("aria-hidden", "true")
    toggle.textContent = r.hasKids ? (r.isOpen ? "\u25BE" : "\u25B8") : ""
    toggle.onclick = (e) => { e.stopPropagation(); focus = i; setOpen(i, !r.isOpen) }
    const label = document.createElement("span")
    label.className = "wtree-label"
    label.textContent = r.item.label
    div.append(toggle)
    if (r.item.heat) {  // optional per-row colour swatch: {color, title}
      const heat = document.createElement("span")
      heat.className = "wtree-heat"
      heat.style.background = r.item.heat.color
      if (r.item.heat.title) heat.title = r.item.heat.title
      div.append(heat)
    }
    div.append(label)
    if (r.item.secondary) {
      const sec = document.createElement("span")
      sec.className = "wtree-secondary"
      sec.textContent = r.item.secondary
      div.append(sec)
    }
    for (const b of (r.item.buttons || [])) {
      const badge = document.createElement("button")
      badge.type = "button"
      badge.className = `wtree-badge ${b.variant || ""} ${b.color || ""}`
      badge.textContent = b.label
      badge.onclick = (e) => {
        e.stopPropagation()
        model.send_msg({ type: "button", id: r.item.id, action: b.action || b.label })
      }
      div.append(badge)
    }
    if (r.item.title) div.title = r.item.title
    div.onclick = () => { focus = i; select(i) }
    return div
  }

  function draw() {
    const max = model.max_height
    spacer.style.height = `${rows.length * ROW}px`
    tree.style.height = `${Math.min(rows.length * ROW + 2, max)}px`
    const top = tree.scrollTop
    const height = tree.clientHeight || max
    const first = Math.max(0, Math.floor(top / ROW) - BUFFER)
    const last = Math.min(rows.length, Math.ceil((top + height) / ROW) + BUFFER)
    const frag = document.createDocumentFragment()
    for (let i = first; i < last; i++) frag.append(rowElement(i))
    spacer.replaceChildren(frag)
    if (rows.length) tree.setAttribute("aria-activedescendant", `wtree-${focus}`)
  }

  function show(i) {
    const top = i * ROW
    if (top < tree.scrollTop) tree.scrollTop = top
    else if (top + ROW > tree.scrollTop + tree.clientHeight) {
      tree.scrollTop = top + ROW - tree.clientHeight
    }
  }

  function setOpen(i, open) {
    const r = rows[i]
    if (!r || !r.hasKids || r.isOpen === open) return
    const k = key(r.path)
    const others = (model.expanded || []).filter((p) => key(p) !== k)
    model.expanded = open ? others.concat([r.path]) : others
  }

  function select(i) {
    const r = rows[i]
    if (!r || r.item.selectable === false) return
    model.active = [r.path]
  }

  tree.addEventListener("scroll", () => requestAnimationFrame(draw))
  tree.addEventListener("keydown", (e) => {
    const r = rows[focus]
    if (!r) return
    let handled = true
    if (e.key === "ArrowDown") focus = Math.min(rows.length - 1, focus + 1)
    else if (e.key === "ArrowUp") focus = Math.max(0, focus - 1)
    else if (e.key === "Home") focus = 0
    else if (e.key === "End") focus = rows.length - 1
    else if (e.key === "ArrowRight") {
      if (r.hasKids && !r.isOpen) { setOpen(focus, true); return e.preventDefault() }
      if (r.isOpen && focus + 1 < rows.length) focus += 1
    } else if (e.key === "ArrowLeft") {
      if (r.isOpen) { setOpen(focus, false); return e.preventDefault() }
      if (r.parent >= 0) focus = r.parent
    } else if (e.key === "Enter" || e.key === " ") select(focus)
    else handled = false
    if (handled) { e.preventDefault(); show(focus); draw() }
  })

  // The first time this tree shows rows, a User Timing mark once the frame showing them has
  // been drawn: at the start of the frame after it (`performance.getEntriesByName(
  // "inspector:tree-rows")`: the benchmark's first paint).
  let marked = false
  const markRows = () => {
    if (marked || !rows.length) return
    marked = true
    requestAnimationFrame(() => requestAnimationFrame(() => performance.mark("inspector:tree-rows")))
  }
  // A selection made elsewhere (a search hit, a diff row) is scrolled into view once its row
  // is among the rows (its branch sent) and the tree is shown: a search hides the tree, and
  // the hit is revealed when the search is cleared.
  let reveal = false
  function revealActive() {
    if (!reveal || !activeKey || !tree.clientHeight) return
    const i = rows.findIndex((r) => key(r.path) === activeKey)
    if (i < 0) return
    reveal = false
    focus = i
    show(i)
  }
  new ResizeObserver(() => { if (reveal) { revealActive(); draw() } }).observe(tree)
  model.on(["items", "expanded", "active", "max_height"], () => {
    const before = activeKey
    flatten()
    reveal = reveal || activeKey !== before
    revealActive()
    draw()
    markRows()
  })
  flatten()
  draw()
  markRows()
  return tree
}
