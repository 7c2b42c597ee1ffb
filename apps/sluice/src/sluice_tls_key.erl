%% @doc Whether the server certificate's key can sign a TLS 1.3 handshake
%% with the signature schemes the listener offers: checked once, at
%% start, from the certificate alone (no handshake is run).
%%
%% A TLS 1.3 server signs its handshake with one of the schemes it offers
%% (its `signature_algs'), and each scheme names the kind of key, and for
%% ECDSA the curve, it signs with (RFC 8446, 4.2.3): ECDSA only on
%% secp256r1, secp384r1 and secp521r1 (brainpool curves on an ssl that
%% lists their schemes), RSA with the rsa_pss_* schemes, EdDSA, and no DSA
%% at all. A certificate whose key fits none of them cannot be used: ssl
%% fails every TLS 1.3 handshake with `insufficient_security'
%% (no_suitable_signature_algorithm), and it does not fall back to TLS
%% 1.2 for a client that offers both. public_key:pkix_test_data/1 makes
%% such a key by default on OTP 25 (ECDSA on the first curve
%% crypto:ec_curves/0 lists, secp160k1 on the OTP 25 and OpenSSL here): the
%% certificate passed every other check at start and no client could
%% connect. TLS 1.2 alone (`{versions, ['tlsv1.2']}')
%% does not sign with these schemes (the curve must be one the client
%% offers instead, which varies by client): not checked.
%% @private
-module(sluice_tls_key).

-export([check/2]).

-include_lib("public_key/include/public_key.hrl").

%% What check/2 refuses: the certificate's key, as `{ecdsa, Curve}',
%% `dsa', `rsa', `rsa_pss', `ed25519' or `ed448'.
-type key() :: {ecdsa, atom()} | dsa | rsa | rsa_pss | ed25519 | ed448.

%% @doc `ok', or `{error, {no_tls13_signature, Key}}' when `Ssl' (the
%% server options as ssl resolved them: ssl:handle_options/2's map, with
%% `versions' as protocol tuples and `signature_algs' as it will offer
%% them) offers TLS 1.3 and none of its schemes signs with the key of
%% `Cert'. Anything this cannot read (a key of another kind, a curve
%% without a name, options of another shape) passes: ssl says the rest.
-spec check(#'OTPCertificate'{}, map()) -> ok | {error, {no_tls13_signature, key()}}.
check(Cert, #{versions := Versions, signature_algs := Schemes})
  when is_list(Versions), is_list(Schemes) ->
    case lists:member({3, 4}, Versions) andalso key(Cert) of
        false -> ok;
        unknown -> ok;
        Key ->
            case lists:any(fun(S) -> signs_with(S, Key) end, Schemes) of
                true -> ok;
                false -> {error, {no_tls13_signature, Key}}
            end
    end;
check(_Cert, _Ssl) ->
    ok.

key(#'OTPCertificate'{tbsCertificate = #'OTPTBSCertificate'{
                                          subjectPublicKeyInfo = #'OTPSubjectPublicKeyInfo'{
                                                                    algorithm = Alg}}}) ->
    case Alg of
        #'PublicKeyAlgorithm'{algorithm = ?'id-ecPublicKey', parameters = {namedCurve, Oid}} ->
            curve(Oid);
        #'PublicKeyAlgorithm'{algorithm = ?'rsaEncryption'} -> rsa;
        #'PublicKeyAlgorithm'{algorithm = ?'id-RSASSA-PSS'} -> rsa_pss;
        #'PublicKeyAlgorithm'{algorithm = ?'id-Ed25519'} -> ed25519;
        #'PublicKeyAlgorithm'{algorithm = ?'id-Ed448'} -> ed448;
        #'PublicKeyAlgorithm'{algorithm = ?'id-dsa'} -> dsa;
        _ -> unknown
    end;
key(_) ->
    unknown.

%% The curve's name as ssl's schemes spell it. public_key's table of
%% names (not a documented function: anything it does not answer is a
%% curve this check leaves alone).
curve(Oid) ->
    try pubkey_cert_records:namedCurves(Oid) of
        Name when is_atom(Name), Name =/= undefined -> {ecdsa, Name};
        _ -> unknown
    catch _:_ -> unknown
    end.

%% Whether the TLS 1.3 scheme S signs with Key. The TLS 1.2 pairs
%% (`{sha256, ecdsa}') are not TLS 1.3 schemes.
signs_with(S, Key) when is_atom(S) ->
    Name = atom_to_list(S),
    lists:any(fun(Prefix) -> lists:prefix(Prefix, Name) end, prefixes(Key));
signs_with(_S, _Key) ->
    false.

%% ecdsa_secp256r1_sha256, ecdsa_brainpoolP256r1tls13_sha256 (RFC 8734).
prefixes({ecdsa, Curve}) ->
    C = atom_to_list(Curve),
    ["ecdsa_" ++ C ++ "_", "ecdsa_" ++ C ++ "tls13_"];
prefixes(rsa) -> ["rsa_pss_rsae_"];
prefixes(rsa_pss) -> ["rsa_pss_pss_"];
prefixes(ed25519) -> ["eddsa_ed25519"];
prefixes(ed448) -> ["eddsa_ed448"];
prefixes(dsa) -> [].
