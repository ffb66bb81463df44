import Foundation

extension TransferManager {
    /// The registered observers, indexed so that an event costs O(its observers), not O(all observers).
    struct Observers: Sendable {
        private var all: [Int: ObserverMailbox] = [:]
        private var byTransfer: [TransferID: [Int: ObserverMailbox]] = [:]

        var isEmpty: Bool { self.all.isEmpty && self.byTransfer.isEmpty }

        mutating func insert(_ mailbox: ObserverMailbox, forKey key: Int) {
            if let id = mailbox.transfer {
                self.byTransfer[id, default: [:]][key] = mailbox
            } else {
                self.all[key] = mailbox
            }
        }

        mutating func removeValue(forKey key: Int) -> ObserverMailbox? {
            if let mailbox = self.all.removeValue(forKey: key) { return mailbox }
            for (id, mailboxes) in self.byTransfer where mailboxes[key] != nil {
                let mailbox = self.byTransfer[id]![key]
                self.byTransfer[id]![key] = nil
                if self.byTransfer[id]!.isEmpty { self.byTransfer[id] = nil }
                return mailbox
            }
            return nil
        }

        /// Posts an event to its observers; those that end with their transfer are closed and forgotten.
        mutating func post(_ event: TransferEvent) {
            for mailbox in self.all.values { mailbox.post(event) }
            guard let mailboxes = self.byTransfer[event.id] else { return }
            for (key, mailbox) in mailboxes {
                mailbox.post(event)
                if case .finished = event.kind, mailbox.endsWhenFinished {
                    mailbox.close()
                    self.byTransfer[event.id]![key] = nil
                }
            }
            if self.byTransfer[event.id]?.isEmpty == true { self.byTransfer[event.id] = nil }
        }

        /// Closes every observer: the scope is ending.
        mutating func closeAll() {
            for mailbox in self.all.values { mailbox.close() }
            for mailboxes in self.byTransfer.values { for mailbox in mailboxes.values { mailbox.close() } }
            self.all = [:]
            self.byTransfer = [:]
        }
    }
}
