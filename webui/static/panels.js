// The parts of the page around the chat: the chat list, the branch tree and the header's menu. On a narrow screen
// (style.css decides where that starts) the chat list and the branch tree are drawers over the chat, with a scrim
// behind them that closes them when tapped, and the header's buttons fold into a menu. The branch tree's open or
// closed state is kept across reloads where it is a side panel; where it is a drawer over the chat (a phone), it opens
// only when asked for on this page, never by itself from a wide screen's choice.

const BRANCHES_KEY = "localchat.branches";  // "open" or "closed"
const DRAWERS = "(max-width: 860px)";  // where the chat list and the branch tree are drawers (style.css)

export class Panels {
  /**
   * `elements`: app, scrim, sidebarButton, menuButton, menu, branches, branchesButton, closeBranchesButton (the
   * branch tree's own ×: the only way to close it by touch where it is a drawer that covers the whole width).
   * `onBranchesShown()`: the branch tree was opened and is to be drawn.
   */
  constructor(elements, onBranchesShown) {
    this.elements = elements;
    this.onBranchesShown = onBranchesShown;
    this.branchesWanted = localStorage.getItem(BRANCHES_KEY) === "open";
    this.branchesAsked = false;  // opened on this page: as a drawer, only then
    this.hasChat = false;
    elements.sidebarButton.addEventListener("click", () => this.openSidebar(!this.sidebarOpen));
    elements.menuButton.addEventListener("click", () => this.openMenu(!this.menuOpen));
    elements.menu.addEventListener("click", (event) => {  // a choice in the menu closes it
      if (event.target.closest("button, a")) this.openMenu(false);
    });
    document.addEventListener("pointerdown", (event) => {  // so does a tap outside it
      if (this.menuOpen && !elements.menu.contains(event.target) && !elements.menuButton.contains(event.target)) {
        this.openMenu(false);
      }
    });
    elements.scrim.addEventListener("click", () => this.closeDrawers());
    elements.closeBranchesButton.addEventListener("click", () => {
      if (this.branchesOpen) this.toggleBranches();
    });
  }

  get sidebarOpen() {
    return this.elements.app.classList.contains("sidebar-open");
  }

  get menuOpen() {
    return this.elements.app.classList.contains("menu-open");
  }

  get branchesOpen() {
    return !this.elements.branches.hidden;
  }

  /** Whether a drawer covers the chat now (on a wide screen neither panel does). */
  get drawerOpen() {
    return getComputedStyle(this.elements.scrim).display !== "none";
  }

  openSidebar(open) {
    if (open && this.drawerOpen) this.toggleBranches();  // the branch tree's drawer gives way
    this.elements.app.classList.toggle("sidebar-open", open);
    this.elements.sidebarButton.setAttribute("aria-expanded", String(open));
  }

  /** Opens the chat list's drawer where it is one (Ctrl+K searches in it). */
  revealSidebar() {
    if (this.elements.sidebarButton.checkVisibility()) this.openSidebar(true);
  }

  openMenu(open) {
    this.elements.app.classList.toggle("menu-open", open);
    this.elements.menuButton.setAttribute("aria-expanded", String(open));
  }

  /** A chat with messages is open (its branch tree can be shown) or not. */
  setChat(hasChat) {
    this.hasChat = hasChat;
    this.showBranches();
  }

  toggleBranches() {
    this.branchesWanted = !this.branchesOpen;
    this.branchesAsked = this.branchesWanted;
    localStorage.setItem(BRANCHES_KEY, this.branchesWanted ? "open" : "closed");
    if (this.branchesWanted) this.openSidebar(false);
    this.showBranches();
  }

  showBranches() {
    const drawer = matchMedia(DRAWERS).matches;
    const open = this.branchesWanted && this.hasChat && (this.branchesAsked || !drawer);
    const changed = open !== this.branchesOpen;
    this.elements.branches.hidden = !open;
    this.elements.branchesButton.setAttribute("aria-pressed", String(open));
    if (open && changed) this.onBranchesShown();
  }

  /** Closes the chat list's drawer, and the branch tree where it is a drawer. */
  closeDrawers() {
    this.openSidebar(false);
    if (this.drawerOpen && this.branchesOpen) this.toggleBranches();
  }

  /** Escape: closes the menu or a drawer; false when none was open. */
  closeTop() {
    if (this.menuOpen) this.openMenu(false);
    else if (this.drawerOpen) this.closeDrawers();
    else return false;
    return true;
  }

  /** Escape on a wide screen: closes the branch tree's side panel; false where it was not open. */
  closeBranches() {
    if (!this.branchesOpen) return false;
    this.toggleBranches();
    return true;
  }
}
