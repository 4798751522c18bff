// A list of two-line items (label, secondary), one of them selected: the WAI-ARIA listbox
// pattern in plain DOM, no imports (Panel ships it inline with the page).
// Keys: ArrowDown/Up move, Home/End, Enter or Space selects; a click selects.
export function render({ model, el }) {
  const root = document.createElement("div")
  root.className = "ilist"
  const title = document.createElement("div")
  title.className = "ilist-title"
  const list = document.createElement("div")
  list.className = "ilist-box"
  list.setAttribute("role", "listbox")
  list.tabIndex = 0
  root.append(title, list)
  let focus = -1  // the keyboard's item (-1: the selected one)

  function option(item, i) {
    const div = document.createElement("div")
    const selected = i === model.active
    div.id = `ilist-${i}`
    div.className = "ilist-item" + (selected ? " selected" : "") + (i === focus ? " focused" : "")
    div.setAttribute("role", "option")
    div.setAttribute("aria-selected", selected ? "true" : "false")
    if (item.icon) {
      const icon = document.createElement("span")
      icon.className = "ilist-icon"
      icon.setAttribute("aria-hidden", "true")
      icon.textContent = item.icon  // a Material Icons ligature
      div.append(icon)
    }
    const text = document.createElement("div")
    text.className = "ilist-text"
    const label = document.createElement("div")
    label.className = "ilist-label"
    label.textContent = item.label
    text.append(label)
    if (item.secondary) {
      const secondary = document.createElement("div")
      secondary.className = "ilist-secondary"
      secondary.textContent = item.secondary
      text.append(secondary)
    }
    div.append(text)
    div.onclick = () => { focus = i; select(i) }
    return div
  }

  function draw() {
    const items = model.items || []
    title.textContent = model.title
    title.style.display = model.title ? "" : "none"
    list.setAttribute("aria-label", model.title || "items")
    if (focus >= items.length) focus = items.length - 1
    list.replaceChildren(...items.map(option))
    const current = focus >= 0 ? focus : model.active
    if (current != null && current >= 0 && current < items.length) {
      list.setAttribute("aria-activedescendant", `ilist-${current}`)
    } else {
      list.removeAttribute("aria-activedescendant")
    }
  }

  function select(i) {
    if (i !== model.active) model.active = i
    else draw()
  }

  list.addEventListener("keydown", (e) => {
    const n = (model.items || []).length
    if (!n) return
    const at = focus >= 0 ? focus : (model.active ?? 0)
    let handled = true
    if (e.key === "ArrowDown") focus = Math.min(n - 1, at + 1)
    else if (e.key === "ArrowUp") focus = Math.max(0, at - 1)
    else if (e.key === "Home") focus = 0
    else if (e.key === "End") focus = n - 1
    else if (e.key === "Enter" || e.key === " ") { focus = at; select(at) }
    else handled = false
    if (handled) {
      e.preventDefault()
      draw()
      list.querySelector(`#ilist-${focus}`)?.scrollIntoView({ block: "nearest" })
    }
  })

  model.on(["items", "active", "title"], draw)
  draw()
  return root
}
