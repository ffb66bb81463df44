import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// Publishing a complete file: its final name chosen, recorded in the store, then the rename.
extension Download {
    /// Moves a publication's file to its final name under the conflict policy, then calls `completion` with the
    /// outcome (after the writer is closed): at once when there is no store, else on an event loop once the store
    /// has committed the record. No task waits for the commit (see ``Publication``).
    ///
    /// The exact final path is chosen first and reported
    /// (``Observer/willPublish(_:at:byteCount:sha256:modificationTime:lingering:then:)``, which records it in the
    /// store) before the rename, which never replaces a file unless the policy is overwrite. If another file takes the
    /// name in between, the next name is chosen and reported. A failure leaves what arrived under the `.part` name, as
    /// a failed attempt does, and is `stopped` once `isStopped` says the attempt was asked to stop.
    static func publish(
        _ publication: Publication,
        observer: some Observer,
        isStopped: @escaping @Sendable () -> Bool,
        completion: @escaping @Sendable (AttemptOutcome) -> Void
    ) {
        let othersOnNetwork = observer.leftNetwork(publication.plan.id)
        Publisher(
            publication,
            observer: observer,
            othersOnNetwork: othersOnNetwork,
            isStopped: isStopped,
            completion: completion
        ).start()
    }

    /// One publication's way through the candidate names; each record's commit calls back into it. A class, so the
    /// callback captures a reference rather than a copy.
    private final class Publisher<O: Observer>: Sendable {
        let publication: Publication
        let observer: O
        /// Whether other transfers were still on the network when this one left it (see ``Observer/leftNetwork(_:)``).
        let othersOnNetwork: Bool
        let isStopped: @Sendable () -> Bool
        let completion: @Sendable (AttemptOutcome) -> Void
        /// The final path's folders below the destination, and the file's name.
        let components: [String]
        let name: String
        /// Read before the rename, which keeps it: the completion is recorded with it before the file is in place.
        let modified: Double?

        init(
            _ publication: Publication,
            observer: O,
            othersOnNetwork: Bool,
            isStopped: @escaping @Sendable () -> Bool,
            completion: @escaping @Sendable (AttemptOutcome) -> Void
        ) {
            self.publication = publication
            self.observer = observer
            self.othersOnNetwork = othersOnNetwork
            self.isStopped = isStopped
            self.completion = completion
            var components = publication.plan.nameComponents
            self.name = components.removeLast()
            self.components = components
            self.modified =
                publication.modified ?? Persisted.sizeAndModification(publication.writer.partPath)?.1
        }

        private var plan: Plan { self.publication.plan }
        private var writer: BodyWriter { self.publication.writer }

        private func path(_ name: String) -> String { self.plan.finalPath(self.components + [name]) }

        func start() {
            if self.plan.conflictPolicy == .overwrite {
                let target = self.path(self.name)
                self.record(target) { self.replace(at: target, recorded: self.observer.recordsPublications) }
                return
            }
            self.tryName(from: 0)
        }

        /// Takes the first name from `index` on that may be free, records it, and renames the file to it; the next
        /// name when another file took it meanwhile. Under rename, the first name is tried without looking (the
        /// no-replace rename says if it is taken: one system call for most files); other names, and every name under
        /// skip and fail, are looked at first, so that the store records a name that was free. Names are built one
        /// at a time: most files take the first, and building 10,000 names per file costs more than the download.
        /// Each record's commit (or, without a store, the renames before it) calls back to rename, and to go on from
        /// the next name.
        private func tryName(from index: Int) {
            let last = self.plan.conflictPolicy == .rename ? 9_999 : 0
            var index = index
            while index <= last {
                let (tried, next) = (index, index + 1)
                index = next
                let candidate = tried == 0 ? self.name : FileNaming.numbered(self.name, tried)
                let target = self.path(candidate)
                guard (tried == 0 && self.plan.conflictPolicy == .rename) || !PartialFile.exists(target) else {
                    continue
                }
                self.record(target) {
                    let recorded = self.observer.recordsPublications
                    if self.rename(to: target, named: candidate, recorded: recorded) { self.tryName(from: next) }
                }
                return
            }
            self.writer.discard()
            let path = self.path(self.name)
            switch self.plan.conflictPolicy {
            case .skip: self.end(.skipped(existing: URL(filePath: path)))
            case .fail: self.end(.failed(HaulError(.fileExists, "\(path) exists (conflict policy: fail)")))
            default: self.fail(HaulError(.fileExists, "No free name for \(path) after 9,999 tries"))
            }
        }

        /// Renames the file to `target` unless a file is there; returns true when one is (the next name is to be
        /// tried), else ends the publication.
        private func rename(to target: String, named candidate: String, recorded: Bool) -> Bool {
            do throws(HaulError) {
                guard try self.writer.publishWithoutReplacing(at: target) else { return true }
                self.end(self.completed(target, named: candidate, recorded: recorded))
            } catch {
                self.fail(error)
            }
            return false
        }

        /// Renames the file to `target`, replacing what is there, and ends the publication.
        private func replace(at target: String, recorded: Bool) {
            do throws(HaulError) {
                try self.writer.publishReplacing(at: target)
                self.end(self.completed(target, named: self.name, recorded: recorded))
            } catch {
                self.fail(error)
            }
        }

        private func record(_ target: String, then body: @escaping @Sendable () -> Void) {
            self.observer.willPublish(
                self.plan.id,
                at: target,
                byteCount: self.publication.byteCount,
                sha256: self.publication.sha256,
                modificationTime: self.modified,
                lingering: self.othersOnNetwork,
                then: body
            )
        }

        private func completed(_ target: String, named finalName: String, recorded: Bool) -> AttemptOutcome {
            var file = CompletedFile(
                folder: self.plan.folder,
                relativePath: (self.components + [finalName]).joined(separator: "/"),
                byteCount: self.publication.byteCount,
                sha256: self.publication.sha256,
                modificationTime: self.modified ?? Persisted.sizeAndModification(target)?.1
            )
            // Without a time read before the rename the record cannot tell the file is unchanged: written again.
            file.isRecordedInStore = recorded && self.modified != nil
            return .completed(file)
        }

        private func end(_ outcome: AttemptOutcome) {
            self.writer.close()
            self.completion(outcome)
        }

        /// Ends as a failed attempt does: what arrived stays under its `.part` name, for a retry to find.
        private func fail(_ error: HaulError) {
            self.writer.keepUnpublished()
            self.end(Download.failure(error, stopped: self.isStopped()))
        }
    }
}
